package client_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestSendCarriesTraceContextOverTheBroker: with tracing on, Send and
// SendBatch put the caller's trace context in the message's properties on
// the client's side, so the trace crosses the broker (whose own send span,
// in a request without one, does not replace it). It sets the global
// tracer provider, so it does not run in parallel.
func TestSendCarriesTraceContextOverTheBroker(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	url, key := serve(t, b, broker.Config{})
	c := newClient(t, url, key, b.Clock)
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	defer span.End()
	if _, err := c.Send(ctx, "q", outbox.Message{Body: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendBatch(ctx, "q", []outbox.Message{{Body: []byte("two")}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Store.Peek(context.Background(), "q", mqlite.PeekParams{Max: 10})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("peek: %d messages, %v", len(msgs), err)
	}
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	for _, m := range msgs {
		if got := m.Properties["traceparent"]; got != want {
			t.Errorf("seq %d traceparent %q, want the caller's %q", m.Seq, got, want)
		}
	}
}
