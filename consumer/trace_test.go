package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// endSignal records spans and reports the name of each one that ends.
type endSignal struct {
	*tracetest.SpanRecorder
	ended chan string
}

func (e endSignal) OnEnd(s sdktrace.ReadOnlySpan) {
	e.SpanRecorder.OnEnd(s)
	e.ended <- s.Name()
}

// TestLoopProcessSpan: each handler runs in a process span, child of the
// message's creation context, that the handler's ctx carries; the
// settlement's span is its child; a failure sets its status to Error.
func TestLoopProcessSpan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler error
		settle  string
		status  codes.Code
	}{
		{"success", nil, "complete q", codes.Unset},
		{"failure", errors.New("boom"), "abandon q", codes.Error},
		{"permanent", consumer.Permanent(errors.New("bad input")), "reject q", codes.Error},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := endSignal{tracetest.NewSpanRecorder(), make(chan string, 100)}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			b := testdb.Open(t, mqlite.Options{TracerProvider: tp})
			b.Queue(t, "q", mqlite.QueueOptions{})
			// A message from a traced sender (another process: this
			// test leaves the global provider alone, so the outbox here
			// does not trace).
			sctx, send := tp.Tracer("test").Start(context.Background(), "sender")
			props := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(sctx, props)
			if err := b.Store.Tx(sctx, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("x"), MessageID: "m1", Properties: props})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			send.End()

			seen := make(chan trace.SpanContext, 1)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- consumer.Loop(ctx, b.Store, "q", func(ctx context.Context, _ mqlite.Message) error {
					seen <- trace.SpanContextFromContext(ctx)
					return tc.handler
				}, consumer.LoopOptions{}) // the fake clock stands: an abandoned message does not come back
			}()
			timeout := time.After(30 * time.Second)
		wait:
			for {
				select {
				case name := <-rec.ended:
					if name == "process q" {
						break wait
					}
				case err := <-done:
					t.Fatalf("Loop returned early: %v", err)
				case <-timeout:
					t.Fatal("no process span ended")
				}
			}
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			spans := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				spans[s.Name()] = s
			}
			process, settle := spans["process q"], spans[tc.settle]
			if process == nil || settle == nil {
				t.Fatalf("spans %v, want process q and %s", spans, tc.settle)
			}
			if got := <-seen; got.SpanID() != process.SpanContext().SpanID() {
				t.Errorf("handler ctx span %s, want the process span %s", got.SpanID(), process.SpanContext().SpanID())
			}
			if p := process.Parent(); p.SpanID() != send.SpanContext().SpanID() || !p.IsRemote() ||
				process.SpanContext().TraceID() != send.SpanContext().TraceID() {
				t.Errorf("process parent %v, want the sender's span (remote)", p)
			}
			if settle.Parent().SpanID() != process.SpanContext().SpanID() {
				t.Errorf("%s parent %s, want the process span", tc.settle, settle.Parent().SpanID())
			}
			if process.Status().Code != tc.status {
				t.Errorf("process status %v, want %v", process.Status(), tc.status)
			}
		})
	}
}
