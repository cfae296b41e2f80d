package consumer

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/tracing"
)

// startProcess starts d's process span, when tracing is on, and returns the
// handler's ctx: d.ctx with the span, or d.ctx itself.
func (l *loop) startProcess(d *delivery) (context.Context, trace.Span) {
	tr := tracing.Of(l.src)
	if tr == nil {
		return d.ctx, nil
	}
	ctx := d.ctx
	if sc := tracing.Extract(d.msg.Properties); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, d.span = tracing.Start(ctx, tr, trace.SpanKindConsumer, tracing.OpProcess, "process", l.queue,
		trace.WithAttributes(tracing.MessageAttrs(d.msg.Seq, d.msg.MessageID, d.msg.DeliveryCount)...))
	return ctx, d.span
}

// startBatchProcess starts the process span of a batch handler call, when
// tracing is on, and returns ctx with it. The messaging conventions give a
// batch links, not a parent: the span links to each message's sender; a
// batch of one message is its sender's child, as in Loop.
func (l *loop) startBatchProcess(ctx context.Context, ds []*delivery) (context.Context, trace.Span) {
	tr := tracing.Of(l.src)
	if tr == nil {
		return ctx, nil
	}
	if len(ds) == 1 {
		m := ds[0].msg
		if sc := tracing.Extract(m.Properties); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		return tracing.Start(ctx, tr, trace.SpanKindConsumer, tracing.OpProcess, "process", l.queue,
			trace.WithAttributes(tracing.MessageAttrs(m.Seq, m.MessageID, m.DeliveryCount)...))
	}
	links := make([]trace.Link, 0, len(ds))
	for _, d := range ds {
		if sc := tracing.Extract(d.msg.Properties); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return tracing.Start(ctx, tr, trace.SpanKindConsumer, tracing.OpProcess, "process", l.queue,
		trace.WithLinks(links...), trace.WithAttributes(tracing.BatchAttrs(len(ds))...))
}

// batchError is the status of a batch's process span: nil when every
// message succeeded, else how many failed and the first failure.
func batchError(errs []error) error {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d messages failed: %w", n, len(errs), first)
}

// settleParent returns ctx for the CompleteBatch of batch: with the process
// span of a lone message as the parent of the settle span, or, for several,
// with links to each one's process span. Tracing off, ctx itself.
func settleParent(ctx context.Context, batch []completion) context.Context {
	if batch[0].span == nil {
		return ctx
	}
	if len(batch) == 1 {
		return trace.ContextWithSpan(ctx, batch[0].span)
	}
	links := make([]trace.Link, 0, len(batch))
	for _, c := range batch {
		if c.span != nil {
			links = append(links, trace.Link{SpanContext: c.span.SpanContext()})
		}
	}
	return tracing.WithLinks(ctx, links)
}
