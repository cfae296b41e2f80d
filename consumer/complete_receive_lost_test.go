package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// lostAnswer is a Store whose first CompleteAndReceive commits (the
// completions and the claim) and then loses its answer, as a broker's
// reply lost past the client's retries.
type lostAnswer struct {
	consumer.Store
	mu   sync.Mutex
	lost int
}

func (s *lostAnswer) CompleteAndReceive(ctx context.Context, q string, locks []mqlite.Lock, o mqlite.ReceiveOptions) ([]error, []mqlite.Message, error) {
	res, msgs, err := s.Store.CompleteAndReceive(ctx, q, locks, o)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lost == 0 && len(msgs) > 0 {
		s.lost = len(msgs)
		return nil, nil, errors.New("the answer was lost")
	}
	return res, msgs, err
}

// TestLoopTakesBackALostClaim: the completer's CompleteAndReceive claims
// the next message and its answer is lost. Loop completes alone and takes
// the claim back by its attempt id: the message is handled at once, on
// its first delivery, not held by nobody until its lease ends.
func TestLoopTakesBackALostClaim(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		src := &lostAnswer{Store: e.src}
		seqs := e.send("a", "b", "c", "d")
		opts := e.options(consumer.LoopConfig{Concurrency: 1, Prefetch: -1})
		stop := e.launch(func(lctx context.Context) error {
			return consumer.Loop(lctx, src, "q", func(context.Context, mqlite.Message) error { return nil }, opts)
		})
		synctest.Wait()
		must(t, stop())
		src.mu.Lock()
		lost := src.lost
		src.mu.Unlock()
		t.Logf("answers lost with a claim in them: 1, of %d messages", lost)
		if lost != 1 {
			t.Fatalf("the lost answer claimed %d messages, want 1 (the test did not exercise a lost claim)", lost)
		}
		st, err := e.st.Stats(ctx, "q")
		must(t, err)
		if st.Locked != 0 || st.Active != 0 {
			t.Fatalf("after the loop: %+v; want every message completed, none held by nobody until its lease ends", st)
		}
		for _, seq := range seqs {
			if w := fmt.Sprint("completed ", seq); !slices.Contains(e.obs.events, w) {
				t.Fatalf("events %v: want %q", e.obs.events, w)
			}
		}
	})
}
