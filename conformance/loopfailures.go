package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// loopBound is how long a consumer.Loop subtest waits for the handler calls
// it expects: far more than the few dozen calls take, and less than the
// one minute Loop's own receive waits, so a Loop that stopped receiving
// fails here with the count it reached instead of hanging.
const loopBound = 30 * time.Second

// errGatewayDown is the failing handlers' error: a downstream outage.
var errGatewayDown = errors.New("payment gateway down")

// prefetches are the LoopConfig.Prefetch values the Loop subtests run
// with: none, the default (Concurrency) and more than Concurrency. Loop
// holds Concurrency+Prefetch messages, its window.
var prefetches = []struct {
	name     string
	prefetch int
}{{"PrefetchNone", -1}, {"PrefetchDefault", 0}, {"Prefetch8", 8}}

// loopConcurrency is the LoopConfig.Concurrency of the Loop subtests.
const loopConcurrency = 2

// window is what Loop holds with prefetch (a LoopConfig.Prefetch).
func window(prefetch int) int {
	switch prefetch {
	case -1:
		return loopConcurrency
	case 0:
		return 2 * loopConcurrency
	}
	return loopConcurrency + prefetch
}

// loopFailureTests: consumer.Loop keeps receiving whatever its handler
// returns. A handler that fails every call (a downstream outage), fails
// each message's first delivery, or asks for a retry with RetryAfter(err,
// 0) never freezes Loop, whatever its window, and a burst of exactly a
// window of messages is handled again and again.
func loopFailureTests() []subtest {
	var out []subtest
	for _, p := range prefetches {
		cfg := consumer.LoopConfig{Concurrency: loopConcurrency, Prefetch: p.prefetch,
			Backoff: consumer.Backoff{Initial: -1}, Logger: slog.New(slog.DiscardHandler)}
		w := window(p.prefetch)
		out = append(out,
			subtest{"EveryCallFails" + p.name, func(t *testing.T, h Harness) {
				k := open(t, h)
				k.loopKeepsCalling(cfg, w, func(context.Context, mqlite.Message) error { return errGatewayDown })
			}},
			subtest{"RetryAfterZero" + p.name, func(t *testing.T, h Harness) {
				k := open(t, h)
				k.loopKeepsCalling(cfg, w, func(context.Context, mqlite.Message) error {
					return consumer.RetryAfter(errGatewayDown, 0)
				})
			}},
			subtest{"FirstDeliveryFails" + p.name, func(t *testing.T, h Harness) {
				k := open(t, h)
				k.loopFirstDeliveryFails(cfg, w)
			}},
		)
	}
	// The same with Loop's backoff in wall time: the failed messages come
	// back when their delay passes, with no commit to wake Loop.
	out = append(out, subtest{"EveryCallFailsWithBackoff", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutWallClock)
		k := openWith(t, h, Config{WallClock: true})
		cfg := consumer.LoopConfig{Concurrency: loopConcurrency, Prefetch: -1, Logger: slog.New(slog.DiscardHandler),
			Backoff: consumer.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}}
		k.loopKeepsCalling(cfg, window(-1), func(context.Context, mqlite.Message) error { return errGatewayDown })
	}})
	return out
}

// loopKeepsCalling runs Loop with cfg and a handler that fails as fail
// does over a burst of w messages (Loop's window), and fails unless the
// handler is called three times a window: every message comes back, and
// Loop takes it again.
func (k *kit) loopKeepsCalling(cfg consumer.LoopConfig, w int, fail consumer.Handler) {
	k.t.Helper()
	k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 1000})
	want := int64(3 * w)
	var calls atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	stop := k.runLoop(cfg, func(ctx context.Context, m mqlite.Message) error {
		if calls.Add(1) >= want {
			once.Do(func() { close(enough) })
		}
		return fail(ctx, m)
	})
	k.sendN("q", w)
	k.within(enough, loopBound, func() string {
		return fmt.Sprintf("Loop stopped receiving: %d handler calls for a window of %d failing messages, want %d", calls.Load(), w, want)
	})
	stop()
	if n := len(k.peek("q")) + len(k.deadLetters("q")); n != w {
		k.t.Fatalf("%d messages after the loop, want the %d sent", n, w)
	}
}

// loopFirstDeliveryFails runs Loop with a handler that fails each
// message's first delivery and completes the second, over two bursts of w
// messages (Loop's window), one after the other is done, and fails unless
// every message is completed.
func (k *kit) loopFirstDeliveryFails(cfg consumer.LoopConfig, w int) {
	k.t.Helper()
	k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 1000})
	var mu sync.Mutex
	done := map[int64]bool{}
	var burst chan struct{} // closed when every message of the burst is handled
	var left int
	stop := k.runLoop(cfg, func(_ context.Context, m mqlite.Message) error {
		if m.DeliveryCount == 1 {
			return errGatewayDown
		}
		mu.Lock()
		defer mu.Unlock()
		if !done[m.Seq] {
			done[m.Seq] = true
			if left--; left == 0 {
				close(burst)
			}
		}
		return nil
	})
	for i := range 2 {
		mu.Lock()
		burst, left = make(chan struct{}), w
		ch := burst
		mu.Unlock()
		k.sendN("q", w)
		k.within(ch, loopBound, func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("Loop stopped receiving: burst %d of %d messages failing their first delivery: %d handled", i+1, w, w-left)
		})
	}
	stop()
	if p := k.peek("q"); len(p) != 0 {
		k.t.Fatalf("%d messages left after every one was handled, want none", len(p))
	}
}

// runLoop runs consumer.Loop over queue "q" of k's store and returns the
// function that stops it and fails unless it returned nil.
func (k *kit) runLoop(cfg consumer.LoopConfig, h consumer.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(k.ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Loop(ctx, k.st, "q", h, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				k.t.Errorf("loop: %v", err)
			}
		})
	}
	k.t.Cleanup(stop)
	return stop
}

// within fails with what's message unless ch is closed within bound.
func (k *kit) within(ch <-chan struct{}, bound time.Duration, what func() string) {
	k.t.Helper()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		k.t.Fatalf("%s (after %v)", what(), bound)
	}
}
