package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The GroupCommit area: many callers that send and settle at once, from
// goroutines of their own. The embedded store runs the transactions that
// arrive together in one commit (Store.Tx's group commit, one fsync for
// the group); the broker runs its requests the same way. Whatever groups
// form, each caller gets its own outcome: every caller whose transaction
// committed finds all of its work there, and stays there across a restart;
// a caller that fails takes only its own work with it.

// groupCallers is how many callers run at once in a GroupCommit subtest.
const groupCallers = 16

// together runs fn(i) for i in [0, n) on goroutines of their own, started
// at once, and returns their errors in order.
func together(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// bodiesOf returns the bodies of msgs, sorted.
func bodiesOf(msgs []mqlite.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	slices.Sort(out)
	return out
}

var groupCommitTests = []subtest{
	// 16 callers send 4 transactions of 2 messages each, all at once:
	// every transaction commits, every message is there once with its own
	// seq, and still there after a restart.
	{"ConcurrentSendsAllCommit", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		const rounds, per = 4, 2
		var mu sync.Mutex
		var sent []string
		got := map[int64]bool{}
		errs := together(groupCallers, func(i int) error {
			for r := range rounds {
				msgs := make([]outbox.Message, per)
				for j := range msgs {
					msgs[j].Body = fmt.Appendf(nil, "caller-%02d-round-%d-%d", i, r, j)
				}
				var res []outbox.Result
				err := k.in.Tx(k.ctx, func(send SendFunc) error {
					var err error
					res, err = send("q", msgs...)
					return err
				})
				if err != nil {
					return fmt.Errorf("caller %d, round %d: %w", i, r, err)
				}
				mu.Lock()
				for j, x := range res {
					if x.Err != nil {
						mu.Unlock()
						return fmt.Errorf("caller %d, round %d, message %d: %w", i, r, j, x.Err)
					}
					if got[x.Seq] {
						mu.Unlock()
						return fmt.Errorf("caller %d: seq %d handed out twice", i, x.Seq)
					}
					got[x.Seq] = true
					sent = append(sent, string(msgs[j].Body))
				}
				mu.Unlock()
			}
			return nil
		})
		k.must(errors.Join(errs...), "concurrent sends")
		slices.Sort(sent)
		want := groupCallers * rounds * per
		check := func(when string) {
			t.Helper()
			if s := k.stats("q"); s.Active != int64(want) {
				t.Fatalf("%s: stats %+v, want %d active", when, s, want)
			}
			if b := bodiesOf(k.peek("q")); !slices.Equal(b, sent) {
				t.Fatalf("%s: %d bodies in the queue, want the %d sent, each once", when, len(b), len(sent))
			}
		}
		check("after the sends")
		if h.Features.WithoutRestart == "" {
			k.restart()
			check("after a restart")
		}
	}},
	// Half of 16 callers send and then fail, at once with the other half,
	// which commit: each caller gets its own outcome, and only the
	// committed callers' messages exist.
	{"OneCallerFailsAlone", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		errs := together(groupCallers, func(i int) error {
			return k.in.Tx(k.ctx, func(send SendFunc) error {
				if _, err := send("q", outbox.Message{Body: fmt.Appendf(nil, "caller-%02d", i)}); err != nil {
					return err
				}
				if i%2 == 1 {
					return errRollback
				}
				return nil
			})
		})
		var want []string
		for i, err := range errs {
			if i%2 == 1 {
				k.wantErr(err, errRollback, fmt.Sprintf("caller %d, which fails", i))
				continue
			}
			k.must(err, fmt.Sprintf("caller %d, which commits beside callers that fail", i))
			want = append(want, fmt.Sprintf("caller-%02d", i))
		}
		if got := bodiesOf(k.peek("q")); !slices.Equal(got, want) {
			t.Fatalf("the queue holds %q, want only the committed callers' %q", got, want)
		}
	}},
	// 16 callers complete one delivery each while 16 others send, all at
	// once: every call succeeds, the completed deliveries are gone for
	// good, the sent messages are there.
	{"ConcurrentSettlementsAndSends", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		k.queue("r", mqlite.QueueOptions{})
		k.sendN("q", groupCallers)
		held := k.receive("q", mqlite.ReceiveOptions{Max: groupCallers})
		if len(held) != groupCallers {
			t.Fatalf("received %d, want %d", len(held), groupCallers)
		}
		errs := together(2*groupCallers, func(i int) error {
			if i < groupCallers {
				return k.st.Complete(k.ctx, held[i].Lock())
			}
			_, err := k.sendAll("r", outbox.Message{})
			return err
		})
		k.must(errors.Join(errs...), "concurrent completions and sends")
		if s := k.stats("q"); s.Active+s.Locked+s.Scheduled+s.DeadLettered != 0 {
			t.Fatalf("q after the completions: %+v, want empty", s)
		}
		if s := k.stats("r"); s.Active != groupCallers {
			t.Fatalf("r after the sends: %+v, want %d active", s, groupCallers)
		}
		if h.Features.WithoutRestart == "" {
			k.restart()
			if s := k.stats("q"); s.Active+s.Locked != 0 {
				t.Fatalf("q after a restart: %+v, want empty", s)
			}
			if s := k.stats("r"); s.Active != groupCallers {
				t.Fatalf("r after a restart: %+v, want %d active", s, groupCallers)
			}
		}
	}},
	// 16 callers each complete a delivery and send its effect in one
	// transaction, at once with a caller whose lock is stale: each of the
	// 16 commits its completion and its effect, the stale caller alone
	// fails with ErrLockLost and commits nothing.
	{"ConcurrentEffectsEachAlone", func(t *testing.T, h Harness) {
		k := effects(t, h)
		k.sendN("in", groupCallers)
		held := k.receive("in", mqlite.ReceiveOptions{Max: groupCallers})
		if len(held) != groupCallers {
			t.Fatalf("received %d, want %d", len(held), groupCallers)
		}
		stale := held[0].Lock()
		stale.Token = "0123456789abcdef0123456789abcdef"
		errs := together(groupCallers+1, func(i int) error {
			if i == groupCallers {
				return k.in.EffectsTx(k.ctx, func(ops EffectsOps) error {
					if _, err := ops.Send("out", outbox.Message{Body: []byte("from a stale lock")}); err != nil {
						return err
					}
					return ops.Complete(stale)
				})
			}
			return k.move(held[i], nil)
		})
		k.wantErr(errs[groupCallers], mqlite.ErrLockLost, "the caller with a stale lock")
		k.must(errors.Join(errs[:groupCallers]...), "the callers with live locks")
		if s := k.stats("in"); s.Active+s.Locked != 0 {
			t.Fatalf("in after the moves: %+v, want empty", s)
		}
		out := k.peek("out")
		want := bodiesOf(held)
		if got := bodiesOf(out); !slices.Equal(got, want) {
			t.Fatalf("out holds %d messages %q, want the %d moved, each once, nothing of the stale caller", len(got), got, len(want))
		}
	}},
}
