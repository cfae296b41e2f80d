package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// When Loop (streaming) or LoopBatch (receiving) over the client stop, the
// messages they claimed ahead and never handed to a handler go back through
// Client.Release: ready at once, their delivery not counted, so a queue
// with one delivery each keeps them. The control runs Loop over the client
// with Release hidden (still streaming): Abandon spends the delivery and
// dead-letters them, which shows the test can fail.
func TestReleaseLoopStopOverClient(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := consumer.LoopConfig{Concurrency: 1, Prefetch: 4, DrainTimeout: -1, Logger: quiet}
	type loopFunc func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error
	loop := func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error {
		return consumer.Loop(ctx, src, "q", func(ctx context.Context, m mqlite.Message) error {
			h(m)
			<-ctx.Done()
			return nil
		}, cfg)
	}
	batch := func(ctx context.Context, src consumer.Store, h func(mqlite.Message)) error {
		return consumer.LoopBatch(ctx, src, "q", func(ctx context.Context, msgs []mqlite.Message) []error {
			for _, m := range msgs {
				h(m)
			}
			<-ctx.Done()
			return make([]error, len(msgs))
		}, consumer.BatchConfig{MaxBatch: 1, LoopConfig: cfg})
	}
	for _, c := range []struct {
		name     string
		loop     loopFunc
		releaser bool
	}{
		{"Loop", loop, true},
		{"LoopBatch", batch, true},
		{"Loop without Release (control)", loop, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t, mqlite.QueueOptions{MaxDeliveryCount: 1})
			var src consumer.Store = b.src
			if !c.releaser {
				// Streams as the client does, with no Release.
				src = struct {
					consumer.Store
					consumer.Streamer
				}{b.src, b.src}
			}
			msgs := make([]outbox.Message, 8)
			for i := range msgs {
				msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(i))}
			}
			res, err := b.src.SendBatch(ctx, "q", msgs)
			must(t, err)
			var mu sync.Mutex
			handled := map[int64]bool{}
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			loopErr := make(chan error, 1)
			go func() {
				loopErr <- c.loop(lctx, src, func(m mqlite.Message) {
					mu.Lock()
					handled[m.Seq] = true
					mu.Unlock()
				})
			}()
			// Wait for the one handler to run and the messages
			// claimed ahead of it (Concurrency+Prefetch in all).
			for deadline := time.Now().Add(30 * time.Second); ; {
				locked, err := b.Store.Find(ctx, "q", mqlite.FindParams{State: mqlite.StateLocked})
				must(t, err)
				mu.Lock()
				n := len(handled)
				mu.Unlock()
				if n == 1 && len(locked.Messages) == 5 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d handled, %d locked: want 1 handled and 5 claimed", n, len(locked.Messages))
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			must(t, <-loopErr)
			mu.Lock()
			defer mu.Unlock()
			live, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{})
			must(t, err)
			left := map[int64]mqlite.Message{}
			for _, m := range live {
				left[m.Seq] = m
			}
			spent := 0
			for _, r := range res {
				if handled[r.Seq] {
					continue
				}
				m, ok := left[r.Seq]
				if !ok || m.State != mqlite.StateActive || m.DeliveryCount != 0 {
					spent++
					if c.releaser {
						t.Errorf("message %d never handled: left %v (live %v) with %d deliveries, want active with 0",
							r.Seq, m.State, ok, m.DeliveryCount)
					}
				}
			}
			t.Logf("%d handled, %d of the unhandled spent a delivery", len(handled), spent)
			if !c.releaser && spent == 0 {
				t.Errorf("control: no unhandled message spent a delivery: nothing was claimed ahead")
			}
		})
	}
}
