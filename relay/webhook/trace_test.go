package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/webhook"
)

// TestTraceFollowsMessage follows one trace from outbox.SendOne, inside a
// *sql.Tx of the caller's, through consumer.Loop (whose handler sends on in
// its own transaction) and the relay to a webhook receiver, and checks the
// documented shape (docs/operations.md, "Tracing"): one trace ID at every
// hop, and
//
//	place order                       (the caller's span)
//	└─ send orders          producer  (outbox.SendOne)
//	   └─ process orders    consumer  (Loop's handler; remote parent)
//	      ├─ send events    producer  (the handler's send)
//	      │  └─ relay events producer (the relay's delivery; remote parent)
//	      │     └─ webhook  server    (the receiver, from its headers)
//	      └─ complete orders client   (the settlement)
//
// while "receive orders", the claim, starts a trace of its own (Loop's ctx
// has no span) linked to "send orders". It sets the global tracer provider
// (outbox has no Store to ask for one), so it does not run in parallel.
func TestTraceFollowsMessage(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})

	b := testdb.Open(t, mqlite.Config{TracerProvider: tp})
	b.Queue(t, "orders", mqlite.QueueOptions{})
	b.Queue(t, "events", mqlite.QueueOptions{})
	st := b.Store

	received := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tp.Tracer("receiver").Start(ctx, "webhook", trace.WithSpanKind(trace.SpanKindServer))
		span.End()
		select {
		case received <- r.Header.Clone():
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}

	// The caller's business transaction, with its span.
	ctx, root := tp.Tracer("app").Start(context.Background(), "place order")
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.SendOne(ctx, tx, "orders", outbox.Message{Body: []byte("order 1"), MessageID: "order-1"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	root.End()

	runCtx, stop := context.WithCancel(context.Background())
	loopDone, relayDone := make(chan error, 1), make(chan error, 1)
	go func() {
		loopDone <- consumer.Loop(runCtx, st, "orders", func(ctx context.Context, m mqlite.Message) error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "events", outbox.Message{Body: m.Body, MessageID: "event-1"})
				return err
			})
		}, consumer.LoopConfig{})
	}()
	r, err := relay.New(st, "events", sink, relay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { relayDone <- r.Run(runCtx) }()
	var hdr http.Header
	select {
	case hdr = <-received:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook receiver got nothing")
	}
	stop()
	if err := errors.Join(<-loopDone, <-relayDone); err != nil {
		t.Fatal(err)
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s // one of each name in this test, but for the settlements of events
	}
	get := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no span %q among %d", name, len(spans))
		}
		return s
	}
	traceID := root.SpanContext().TraceID()
	for _, c := range []struct {
		name, parent string
		kind         trace.SpanKind
		remote       bool
	}{
		{"send orders", "place order", trace.SpanKindProducer, false},
		{"process orders", "send orders", trace.SpanKindConsumer, true},
		{"send events", "process orders", trace.SpanKindProducer, false},
		{"relay events", "send events", trace.SpanKindProducer, true},
		{"webhook", "relay events", trace.SpanKindServer, true},
		{"complete orders", "process orders", trace.SpanKindClient, false},
	} {
		s, p := get(c.name), get(c.parent)
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("%s: trace %s, want %s", c.name, s.SpanContext().TraceID(), traceID)
		}
		if s.Parent().SpanID() != p.SpanContext().SpanID() || s.Parent().IsRemote() != c.remote {
			t.Errorf("%s: parent %s (remote %v), want %s's %s (remote %v)", c.name, s.Parent().SpanID(),
				s.Parent().IsRemote(), c.parent, p.SpanContext().SpanID(), c.remote)
		}
		if s.SpanKind() != c.kind {
			t.Errorf("%s: kind %v, want %v", c.name, s.SpanKind(), c.kind)
		}
		if s.Status().Code == codes.Error {
			t.Errorf("%s: status %v", c.name, s.Status())
		}
	}
	// The claim: a trace of its own, linked to the message's creation.
	claim := get("receive orders")
	if claim.SpanContext().TraceID() == traceID || len(claim.Links()) != 1 ||
		claim.Links()[0].SpanContext.SpanID() != get("send orders").SpanContext().SpanID() {
		t.Errorf("receive orders: trace %s, links %+v; want its own trace, linked to send orders", claim.SpanContext().TraceID(), claim.Links())
	}
	// The receiver's headers: W3C Trace Context of the relay span.
	want := get("relay events").SpanContext()
	if got := hdr.Get("Traceparent"); got != "00-"+want.TraceID().String()+"-"+want.SpanID().String()+"-01" {
		t.Errorf("traceparent header %q, want the relay span %s", got, want.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range get("process orders").Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, v := range map[string]string{
		"messaging.system": "mqlite", "messaging.destination.name": "orders", "messaging.operation.type": "process",
		"messaging.message.id": "order-1", "messaging.mqlite.message.delivery_count": "1",
	} {
		if attrs[k] != v {
			t.Errorf("process orders: %s = %q, want %q", k, attrs[k], v)
		}
	}
}
