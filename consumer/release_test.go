package consumer_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// When Loop or LoopBatch stop, the messages they claimed ahead and never
// handed to a handler go back through the store's Release: ready at once,
// their delivery not counted, so a queue with one delivery each keeps
// them. The control runs the same over a Store that is not a Releaser
// (Abandon spends the delivery): it shows the test can fail.
func TestLoopStopReleasesUnstartedUncounted(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	loops := map[string]func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error{
		"Loop": func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error {
			return consumer.Loop(ctx, src, "q", func(ctx context.Context, m mqlite.Message) error {
				h(m)
				<-ctx.Done()
				return nil
			}, consumer.LoopConfig{Concurrency: 1, Prefetch: 4, DrainTimeout: -1, Logger: quiet})
		},
		"LoopBatch": func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error {
			return consumer.LoopBatch(ctx, src, "q", func(ctx context.Context, msgs []mqlite.Message) []error {
				for _, m := range msgs {
					h(m)
				}
				<-ctx.Done()
				return make([]error, len(msgs))
			}, consumer.BatchConfig{MaxBatch: 2, LoopConfig: consumer.LoopConfig{Concurrency: 1, Prefetch: 4, DrainTimeout: -1, Logger: quiet}})
		},
	}
	for name, loop := range loops {
		for _, releaser := range []bool{true, false} {
			t.Run(name+map[bool]string{true: " over the store", false: " over a Store without Release (control)"}[releaser], func(t *testing.T) {
				bubble(t, mqlite.QueueOptions{MaxDeliveryCount: 1}, func(t *testing.T, e *loopEnv) {
					var src consumer.Store = e.src // not a Releaser
					if releaser {
						src = e.st
					}
					var mu sync.Mutex
					handled := map[int64]bool{}
					stop := e.launch(func(ctx context.Context) error {
						return loop(ctx, src, func(m mqlite.Message) {
							mu.Lock()
							handled[m.Seq] = true
							mu.Unlock()
						})
					})
					seqs := e.send("a", "b", "c", "d", "e", "f", "g", "h")
					synctest.Wait() // the first handler runs, the rest claimed ahead wait
					must(t, stop())
					mu.Lock()
					defer mu.Unlock()
					left := e.peek()
					spent := 0
					for _, seq := range seqs {
						if handled[seq] {
							continue
						}
						m, ok := left[seq]
						if !ok || m.State != mqlite.StateActive || m.DeliveryCount != 0 {
							spent++
							if releaser {
								t.Errorf("message %d never handled: left %v with %d deliveries (%s), want active with 0",
									seq, m.State, m.DeliveryCount, m.DeadLetterDescription)
							}
						}
					}
					t.Logf("%d handled, %d of the unhandled spent a delivery", len(handled), spent)
					if !releaser && spent == 0 {
						t.Errorf("control: no unhandled message spent a delivery: nothing was claimed ahead")
					}
				})
			})
		}
	}
}
