package outbox

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

// startSend starts the send span of msgs to queue: the context the
// messages are created in, which they carry to their consumers.
func startSend(ctx context.Context, tr trace.Tracer, queue string, msgs []Message) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithAttributes(tracing.BatchAttrs(len(msgs))...)}
	if len(msgs) == 1 && msgs[0].MessageID != "" {
		opts = append(opts, trace.WithAttributes(tracing.MessageAttrs(0, msgs[0].MessageID, 0)...))
	}
	return tracing.Start(ctx, tr, trace.SpanKindProducer, tracing.OpSend, "send", queue, opts...)
}

// endSend ends the send span with the outcome: the seq of a single
// message, or the error of the call, or of a single message's slot.
func endSend(span trace.Span, res []Result, err error) {
	if err == nil && len(res) == 1 {
		if res[0].Err != nil {
			err = res[0].Err
		} else {
			span.SetAttributes(tracing.AttrSeq.Int64(res[0].Seq))
		}
	}
	tracing.End(span, err)
}

// withTrace returns msgs with ctx's trace context added to each one's
// properties (copies: the caller's messages and maps are not changed).
func withTrace(ctx context.Context, msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Properties = tracing.Inject(ctx, m.Properties, mqlite.MaxPropertiesBytes)
		out[i] = m
	}
	return out
}
