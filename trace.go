package mqlite

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/tracing"
)

// TracerProvider returns the provider of the store's spans:
// Config.TracerProvider, or otel.GetTracerProvider() (read at each call)
// when that is nil. consumer.Loop and the relay ask for it
// (consumer.Source.TracerProvider), so one setting traces a whole process.
func (s *Store) TracerProvider() trace.TracerProvider {
	if s.opts.TracerProvider != nil {
		return s.opts.TracerProvider
	}
	return otel.GetTracerProvider()
}

// startSettle starts the span of a settlement named op ("complete",
// "abandon", ...) of n locks of queue, as a child of ctx's span, linked to
// the spans ctx names (tracing.WithLinks); it returns a nil span when
// tracing is off.
func (s *Store) startSettle(ctx context.Context, op, queue string, n int) trace.Span {
	tr := tracing.Tracer(s.opts.TracerProvider)
	if tr == nil {
		return nil
	}
	_, span := tracing.Start(ctx, tr, trace.SpanKindClient, tracing.OpSettle, op, queue,
		trace.WithAttributes(tracing.BatchAttrs(n)...), trace.WithLinks(tracing.Links(ctx)...))
	return span
}

// endSettle ends a span of startSettle (nil: tracing was off).
func endSettle(span trace.Span, err error) {
	if span != nil {
		tracing.End(span, err)
	}
}

// traceClaim records, when tracing is on, the claim of msgs from queue that
// began at start: a receive span, child of ctx's span, with a link to the
// context each message was sent in. A claim that found nothing, or was
// cancelled, leaves no span: an idle or stopping consumer does not fill the
// traces with empty receives.
func (s *Store) traceClaim(ctx context.Context, tr trace.Tracer, queue string, start time.Time, msgs []Message, err error) {
	if len(msgs) == 0 && (err == nil || ctx.Err() != nil) {
		return
	}
	links := make([]trace.Link, 0, len(msgs))
	for _, m := range msgs {
		if sc := tracing.Extract(m.Properties); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: tracing.MessageAttrs(m.Seq, m.MessageID, m.DeliveryCount)})
		}
	}
	_, span := tracing.Start(ctx, tr, trace.SpanKindClient, tracing.OpReceive, "receive", queue,
		trace.WithTimestamp(start), trace.WithLinks(links...), trace.WithAttributes(tracing.BatchAttrs(len(msgs))...))
	tracing.End(span, err)
}
