// Package tracing is mqlite's OpenTelemetry plumbing: whether tracing is on,
// the W3C Trace Context a message carries in its properties, and the
// messaging attributes of its spans (docs/operations.md, "Tracing").
//
// Tracing is off when the provider is a no-op: a noop.TracerProvider, or the
// global provider while nobody has called otel.SetTracerProvider. Off, the
// callers start no span and allocate nothing; the check is an atomic load
// and a comparison.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of mqlite's tracers.
const Scope = "github.com/mqlite/mqlite"

// The properties a message's trace context travels in: W3C Trace Context's
// header names.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// System is the messaging.system of every span.
const System = "mqlite"

// The span attributes of mqlite's own (no semantic convention has them).
const (
	AttrSeq           = attribute.Key("messaging.mqlite.message.seq")
	AttrDeliveryCount = attribute.Key("messaging.mqlite.message.delivery_count")
)

// propagator is W3C Trace Context, named explicitly: the global propagator
// is a no-op until the application sets one, and a message's trace context
// must travel whatever the application did.
var propagator = propagation.TraceContext{}

// unset is the global provider before otel.SetTracerProvider: a delegate
// whose spans record nothing until a provider is set.
var unset = otel.GetTracerProvider()

// Tracer returns mqlite's tracer of tp (nil, or the global provider as it
// was before any was set: the global provider, read at each call so that a
// provider set after Open is used), or nil when tracing is off.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil || tp == unset {
		tp = otel.GetTracerProvider()
		if tp == unset {
			return nil
		}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(Scope)
}

// Of returns the tracer of src's spans: of its TracerProvider() when it has
// that method (consumer.Store has it), of the global
// provider otherwise; nil when tracing is off. It is cheap enough to ask
// per message, so that a provider set later is picked up.
func Of(src any) trace.Tracer {
	if s, ok := src.(interface{ TracerProvider() trace.TracerProvider }); ok {
		return Tracer(s.TracerProvider())
	}
	return Tracer(nil)
}

// Start starts a span of kind for operation op (a messaging.operation.type)
// named "<name> <queue>", with the messaging attributes, as a child of
// ctx's span; opts add to it. It is the caller's to check that tr is not
// nil.
func Start(ctx context.Context, tr trace.Tracer, kind trace.SpanKind, op attribute.KeyValue, name, queue string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithSpanKind(kind), trace.WithAttributes(
		semconv.MessagingSystemKey.String(System), op, semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(queue)))
	return tr.Start(ctx, name+" "+queue, opts...)
}

// The operations (messaging.operation.type) of mqlite's spans.
var (
	OpSend    = semconv.MessagingOperationTypeSend
	OpReceive = semconv.MessagingOperationTypeReceive
	OpProcess = semconv.MessagingOperationTypeProcess
	OpSettle  = semconv.MessagingOperationTypeSettle
)

// MessageAttrs are the attributes of one message: those of its seq,
// MessageID and delivery count that are known (not zero).
func MessageAttrs(seq int64, messageID string, deliveryCount int) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 3)
	if seq > 0 {
		a = append(a, AttrSeq.Int64(seq))
	}
	if messageID != "" {
		a = append(a, semconv.MessagingMessageID(messageID))
	}
	if deliveryCount > 0 {
		a = append(a, AttrDeliveryCount.Int(deliveryCount))
	}
	return a
}

// BatchAttrs is messaging.batch.message_count, for an operation on n > 1
// messages; none for one.
func BatchAttrs(n int) []attribute.KeyValue {
	if n < 2 {
		return nil
	}
	return []attribute.KeyValue{semconv.MessagingBatchMessageCount(n)}
}

// End ends span with err's status: Error with err's text, or unset.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Extract returns the trace context props carry (traceparent and
// tracestate), or an invalid SpanContext when they carry none or a
// malformed one.
func Extract(props map[string]string) trace.SpanContext {
	if props[Traceparent] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(props)))
}

// Inject returns props with ctx's trace context added as traceparent (and
// tracestate when it has one): a copy, props is not changed. It returns
// props itself when ctx carries no valid span context, when props already
// has a traceparent (the caller's own wins), or when the two properties
// would take props past maxBytes (the sum of keys and values, as
// mqlite.MaxPropertiesBytes counts it): a trace context is never why a
// send fails.
func Inject(ctx context.Context, props map[string]string, maxBytes int) map[string]string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return props
	}
	if _, ok := props[Traceparent]; ok {
		return props
	}
	out := make(map[string]string, len(props)+2)
	size := 0
	for k, v := range props {
		out[k] = v
		size += len(k) + len(v)
	}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(out))
	for _, k := range []string{Traceparent, Tracestate} {
		if v, ok := out[k]; ok {
			size += len(k) + len(v)
		}
	}
	if size > maxBytes {
		return props
	}
	return out
}

// Replace is Inject for a message that carries a trace context already:
// ctx's replaces it (when ctx has a valid one).
func Replace(ctx context.Context, props map[string]string, maxBytes int) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return props
	}
	base := make(map[string]string, len(props))
	for k, v := range props {
		if k != Traceparent && k != Tracestate {
			base[k] = v
		}
	}
	return Inject(ctx, base, maxBytes)
}

// Headers calls set with the trace context props carry, as W3C Trace
// Context headers (traceparent, and tracestate when present), after
// checking it: a malformed one is not passed on. It calls set for nothing
// when props carry none.
func Headers(props map[string]string, set func(key, value string)) {
	sc := Extract(props)
	if !sc.IsValid() {
		return
	}
	propagator.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), carrier(set))
}

// carrier is a propagation.TextMapCarrier that only sets.
type carrier func(key, value string)

func (c carrier) Get(string) string     { return "" }
func (c carrier) Set(key, value string) { c(key, value) }
func (c carrier) Keys() []string        { return nil }

// linksKey is the context key of WithLinks.
type linksKey struct{}

// WithLinks returns ctx carrying links for the next span the store starts
// in it: how consumer.Loop links the settle span of a shared commit to the
// process span of each message in it.
func WithLinks(ctx context.Context, links []trace.Link) context.Context {
	return context.WithValue(ctx, linksKey{}, links)
}

// Links returns the links of WithLinks in ctx, or none.
func Links(ctx context.Context) []trace.Link {
	l, _ := ctx.Value(linksKey{}).([]trace.Link)
	return l
}
