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
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
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
			b := testdb.Open(t, mqlite.Config{TracerProvider: tp})
			b.Queue(t, "q", mqlite.QueueOptions{})
			// A message from a traced sender (another process: this
			// test leaves the global provider alone, so the outbox here
			// does not trace).
			sctx, send := tp.Tracer("test").Start(context.Background(), "sender")
			props := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(sctx, props)
			if _, err := outbox.Send(sctx, b.Store, "q", outbox.Message{Body: []byte("x"), MessageID: "m1", Properties: props}); err != nil {
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
				}, consumer.LoopConfig{}) // the fake clock stands: an abandoned message does not come back
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

// TestLoopBatchProcessSpan: each batch handler call runs in one process
// span that the handler's ctx carries: linked to every message's sender
// for a batch (a lone message is its sender's child), with Error status
// when a message of the batch failed; each settlement's span is its child.
func TestLoopBatchProcessSpan(t *testing.T) {
	t.Parallel()
	rec := endSignal{tracetest.NewSpanRecorder(), make(chan string, 100)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	b := testdb.Open(t, mqlite.Config{TracerProvider: tp})
	b.Queue(t, "q", mqlite.QueueOptions{})
	senders := map[string]trace.SpanContext{} // body → its sender's span
	for _, body := range []string{"a", "bad", "c"} {
		sctx, send := tp.Tracer("test").Start(context.Background(), "sender "+body)
		props := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(sctx, props)
		if _, err := outbox.Send(sctx, b.Store, "q", outbox.Message{Body: []byte(body), Properties: props}); err != nil {
			t.Fatal(err)
		}
		send.End()
		senders[body] = send.SpanContext()
	}

	type call struct {
		span   trace.SpanContext
		bodies []string
	}
	calls := make(chan call, 3)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consumer.LoopBatch(ctx, b.Store, "q", func(ctx context.Context, msgs []mqlite.Message) []error {
			c := call{span: trace.SpanContextFromContext(ctx)}
			errs := make([]error, len(msgs))
			for i, m := range msgs {
				c.bodies = append(c.bodies, string(m.Body))
				if string(m.Body) == "bad" {
					errs[i] = errors.New("boom")
				}
			}
			calls <- c
			return errs
		}, consumer.BatchConfig{MaxBatch: 3})
	}()
	var got []call
	timeout := time.After(30 * time.Second)
	for n := 0; n < 3; {
		select {
		case c := <-calls:
			got = append(got, c)
			n += len(c.bodies)
		case err := <-done:
			t.Fatalf("LoopBatch returned early: %v", err)
		case <-timeout:
			t.Fatalf("handled %d of 3 messages", n)
		}
	}
	// Every settlement span ends before Loop returns.
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	process := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var settles []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "process q":
			process[s.SpanContext().SpanID()] = s
		case "complete q", "abandon q":
			settles = append(settles, s)
		}
	}
	for _, c := range got {
		p := process[c.span.SpanID()]
		if p == nil {
			t.Fatalf("the handler's ctx of %v carries span %s, not a process span", c.bodies, c.span.SpanID())
		}
		failed := false
		for _, body := range c.bodies {
			failed = failed || body == "bad"
		}
		if want := map[bool]codes.Code{false: codes.Unset, true: codes.Error}[failed]; p.Status().Code != want {
			t.Errorf("batch %v: status %v, want %v", c.bodies, p.Status(), want)
		}
		if len(c.bodies) == 1 {
			if par := p.Parent(); par.SpanID() != senders[c.bodies[0]].SpanID() || !par.IsRemote() {
				t.Errorf("lone message %s: parent %v, want its sender (remote)", c.bodies[0], par)
			}
			continue
		}
		linked := map[trace.SpanID]bool{}
		for _, l := range p.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
		for _, body := range c.bodies {
			if !linked[senders[body].SpanID()] {
				t.Errorf("batch %v: no link to the sender of %s", c.bodies, body)
			}
		}
		if p.Parent().IsValid() {
			t.Errorf("batch %v: parent %v, want none (links only)", c.bodies, p.Parent())
		}
	}
	// Every message is settled once. The completer gathers whatever
	// completions wait when it runs, so a and c may share one CompleteBatch
	// span (with messaging.batch.message_count 2) or have one each: count
	// the messages, not the spans.
	settled := 0
	for _, s := range settles {
		settled += batchCount(s)
	}
	if settled != 3 {
		t.Fatalf("%d settlement spans settle %d messages, want 3", len(settles), settled)
	}
	for _, s := range settles {
		if process[s.Parent().SpanID()] == nil && !linksProcess(s, process) {
			t.Errorf("%s: neither child of nor linked to a process span", s.Name())
		}
	}
}

// batchCount is how many messages the operation of span s covered: its
// messaging.batch.message_count, or 1 without one.
func batchCount(s sdktrace.ReadOnlySpan) int {
	for _, a := range s.Attributes() {
		if a.Key == semconv.MessagingBatchMessageCountKey {
			return int(a.Value.AsInt64())
		}
	}
	return 1
}

// linksProcess reports whether s links to one of the process spans (a
// CompleteBatch of several messages links to each one's span).
func linksProcess(s sdktrace.ReadOnlySpan, process map[trace.SpanID]sdktrace.ReadOnlySpan) bool {
	for _, l := range s.Links() {
		if process[l.SpanContext.SpanID()] != nil {
			return true
		}
	}
	return false
}
