package conformance

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The Effects area: a delivery settled inside a transaction that also
// sends (Instance.EffectsTx). The effect here is the onward message, the
// one write every implementation can make in the transaction: embedded,
// the application's own rows ride in the same transaction the same way.

// effects opens an implementation with queues "in" and "out" for t, or
// skips t under Features.WithoutEffects.
func effects(t *testing.T, h Harness) *kit {
	t.Helper()
	skipWithout(t, h.Features.WithoutEffects)
	k := open(t, h)
	if k.in.EffectsTx == nil {
		t.Fatal("conformance: Instance.EffectsTx is nil without Features.WithoutEffects")
	}
	k.queue("in", mqlite.QueueOptions{})
	k.queue("out", mqlite.QueueOptions{})
	return k
}

// onwardID is the MessageID of the message moved onward from in's seq.
func onwardID(seq int64) string { return fmt.Sprintf("moved-%d", seq) }

// move sends m onward to "out" and completes m in one transaction; then,
// unless it is nil, runs also inside it, whose error is move's.
func (k *kit) move(m mqlite.Message, also func(ops EffectsOps) error) error {
	return k.in.EffectsTx(k.ctx, func(ops EffectsOps) error {
		res, err := ops.Send("out", outbox.Message{Body: m.Body, MessageID: onwardID(m.Seq)})
		if err != nil {
			return err
		}
		if res[0].Err != nil {
			return res[0].Err
		}
		if err := ops.Complete(m.Lock()); err != nil {
			return err
		}
		if also != nil {
			return also(ops)
		}
		return nil
	})
}

// onward returns the MessageIDs of the messages in "out", sorted.
func (k *kit) onward() []string {
	k.t.Helper()
	var ids []string
	for _, m := range k.peek("out") {
		ids = append(ids, m.MessageID)
	}
	slices.Sort(ids)
	return ids
}

// gone fails unless in's message seq is settled for good: nothing of "in"
// comes again, not even once every lease has passed.
func (k *kit) gone(seq int64) {
	k.t.Helper()
	k.advance(lease)
	for _, m := range k.peek("in") {
		if m.Seq == seq {
			k.t.Fatalf("message %d is still in the queue: %+v", seq, m)
		}
	}
}

var effectTests = []subtest{
	// The onward message and the completion commit together: the message
	// is gone for good and its effect exists once; a retry of the
	// completion after the commit replays from its receipt.
	{"EffectAndCompletionCommitTogether", func(t *testing.T, h Harness) {
		k := effects(t, h)
		seq := k.send("in", outbox.Message{Body: k.body()})[0]
		m := k.one("in", seq)
		k.must(k.move(m, nil), "move")
		if got := k.onward(); !slices.Equal(got, []string{onwardID(seq)}) {
			t.Fatalf("out holds %v, want the one moved message", got)
		}
		k.gone(seq)
		k.must(k.st.Complete(k.ctx, m.Lock()), "the same completion again")
	}},
	// A transaction that fails after the completion commits neither the
	// effect nor the completion: the delivery is still held under its
	// token.
	{"RollbackUndoesBoth", func(t *testing.T, h Harness) {
		k := effects(t, h)
		seq := k.send("in", outbox.Message{Body: k.body()})[0]
		m := k.one("in", seq)
		err := k.move(m, func(EffectsOps) error { return errRollback })
		k.wantErr(err, errRollback, "move that fails")
		if got := k.onward(); len(got) != 0 {
			t.Fatalf("out holds %v after the failed transaction, want nothing", got)
		}
		k.none("in") // still locked
		k.must(k.st.Complete(k.ctx, m.Lock()), "complete with the lock the transaction did not settle")
	}},
	// A lease that lapsed before the transaction, or a token a newer
	// delivery replaced, fails the completion with ErrLockLost; the
	// transaction commits nothing, and the newer delivery moves the
	// message once.
	{"LockLostCommitsNothing", func(t *testing.T, h Harness) {
		k := effects(t, h)
		seq := k.send("in", outbox.Message{Body: k.body()})[0]
		m := k.one("in", seq)
		k.advance(lease)
		k.wantErr(k.move(m, nil), mqlite.ErrLockLost, "move with a lapsed lease")
		if got := k.onward(); len(got) != 0 {
			t.Fatalf("out holds %v after a lapsed lease, want nothing", got)
		}
		again := k.one("in", seq)
		if again.DeliveryCount != 2 {
			t.Fatalf("redelivery count %d, want 2", again.DeliveryCount)
		}
		k.wantErr(k.move(m, nil), mqlite.ErrLockLost, "move with the stale token")
		if got := k.onward(); len(got) != 0 {
			t.Fatalf("out holds %v after a stale token, want nothing", got)
		}
		k.must(k.move(again, nil), "move with the current lock")
		if got := k.onward(); !slices.Equal(got, []string{onwardID(seq)}) {
			t.Fatalf("out holds %v, want the one moved message", got)
		}
		k.gone(seq)
	}},
	// A reject inside the transaction dead-letters the message with its
	// reason, together with what the transaction sent.
	{"RejectWithEffect", func(t *testing.T, h Harness) {
		k := effects(t, h)
		seq := k.send("in", outbox.Message{Body: k.body()})[0]
		m := k.one("in", seq)
		err := k.in.EffectsTx(k.ctx, func(ops EffectsOps) error {
			if _, err := ops.Send("out", outbox.Message{Body: m.Body, MessageID: onwardID(seq)}); err != nil {
				return err
			}
			return ops.Reject(m.Lock(), "refused", "moved to out as a failure record")
		})
		k.must(err, "reject with an effect")
		dead := k.deadLetters("in")
		if len(dead) != 1 || dead[0].Seq != seq || dead[0].DeadLetterReason != "refused" {
			t.Fatalf("dead letters %+v, want message %d with reason refused", dead, seq)
		}
		if got := k.onward(); !slices.Equal(got, []string{onwardID(seq)}) {
			t.Fatalf("out holds %v, want the failure record", got)
		}
	}},
	// Consume → produce moves each message exactly once while deliveries
	// race: the first delivery's worker finishes after its lease lapsed
	// and a second delivery was handed out, before or after the second
	// worker's move, and the second worker runs its move again, as after
	// an ambiguous commit error: refused, the delivery being settled, with
	// nothing committed. Every message ends up in "out" once and leaves
	// "in".
	{"ConsumeProduceExactlyOnce", func(t *testing.T, h Harness) {
		k := effects(t, h)
		const n = 6
		var sent []int64
		for range n {
			sent = append(sent, k.send("in", outbox.Message{Body: k.body()})...)
		}
		first := k.expect("in", mqlite.ReceiveOptions{Max: n}, sent...)
		k.advance(lease)
		second := k.expect("in", mqlite.ReceiveOptions{Max: n}, sent...)
		var want []string
		for i := range n {
			stale, current := first[i], second[i]
			if i%2 == 0 {
				k.wantErr(k.move(stale, nil), mqlite.ErrLockLost, "the stale worker first")
			}
			k.must(k.move(current, nil), "the current worker")
			// Over a commit request the same run again is its replay.
			if err := k.move(current, nil); err != nil || k.in.EffectsRetry == nil {
				k.wantErr(err, mqlite.ErrLockLost, "the current worker's transaction run again")
			}
			if i%2 == 1 {
				k.wantErr(k.move(stale, nil), mqlite.ErrLockLost, "the stale worker last")
			}
			want = append(want, onwardID(current.Seq))
		}
		slices.Sort(want)
		if got := k.onward(); !slices.Equal(got, want) {
			t.Fatalf("out holds %v, want each message once: %v", got, want)
		}
		k.advance(lease)
		k.none("in")
	}},
	// A re-run transaction whose completion finds its delivery settled
	// fails with ErrAlreadySettled and its effect rows are not committed:
	// a caller that runs its transaction again (after an ambiguous commit
	// error) or a second transaction of the same delivery, at once and
	// past the lease, a completion after a reject and a reject after a
	// completion. The onward message has no MessageID: only the refused
	// settlement keeps it single. Past the receipts' window the error is
	// a lost lock, still with nothing committed.
	{"ReRunFindsDeliverySettled", func(t *testing.T, h Harness) {
		k := effects(t, h)
		// run sends m onward without a MessageID and settles m by reject
		// or complete, in one transaction.
		run := func(m mqlite.Message, reject bool) error {
			return k.in.EffectsTx(k.ctx, func(ops EffectsOps) error {
				if _, err := ops.Send("out", outbox.Message{Body: m.Body}); err != nil {
					return err
				}
				if reject {
					return ops.Reject(m.Lock(), "refused", "")
				}
				return ops.Complete(m.Lock())
			})
		}
		// refused wants run refused with want, matching ErrLockLost, and
		// out holding n messages. Over a commit request
		// (Instance.EffectsRetry), an identical run is the replay of the
		// same request (its key derives from its locks) and may answer
		// the original nil, still with nothing committed again.
		refused := func(m mqlite.Message, reject, identical bool, want error, n int, what string) {
			t.Helper()
			err := run(m, reject)
			if got := k.peek("out"); len(got) != n {
				t.Fatalf("%s (%v): out holds %d messages, want %d: the run committed its effect again", what, err, len(got), n)
			}
			if err == nil && identical && k.in.EffectsRetry != nil {
				return // a commit request's replay of the same request: the original answer
			}
			k.wantErr(err, mqlite.ErrLockLost, what)
			if !errors.Is(err, want) {
				t.Fatalf("%s: %v, want %v", what, err, want)
			}
		}
		s := k.send("in", outbox.Message{Body: k.body()}, outbox.Message{Body: k.body()}, outbox.Message{Body: k.body()})
		ms := k.expect("in", mqlite.ReceiveOptions{Max: 3}, s...)
		k.must(run(ms[0], false), "complete with an effect")
		refused(ms[0], false, true, mqlite.ErrAlreadySettled, 1, "the same transaction run again")
		k.must(run(ms[1], true), "reject with an effect")
		refused(ms[1], false, false, mqlite.ErrAlreadySettled, 2, "a completion after the reject")
		refused(ms[0], true, false, mqlite.ErrAlreadySettled, 2, "a reject after the completion")
		k.advance(2 * lease)
		refused(ms[0], false, true, mqlite.ErrAlreadySettled, 2, "the same transaction run again past the lease")
		again := k.one("in", s[2]) // its first lease lapsed unsettled
		k.must(run(again, false), "complete the redelivery with an effect")
		refused(again, false, true, mqlite.ErrAlreadySettled, 3, "the redelivery's transaction run again")
		k.advance(replayWindow + time.Second)
		refused(ms[0], false, false, mqlite.ErrLockLost, 3, "the same transaction run again past the receipts' window")
		k.gone(s[0])
		k.gone(s[2])
	}},
	// A commit retried after a lost reply (Instance.EffectsRetry) commits
	// nothing new and succeeds, even once the lease it settled has passed:
	// the message moved once, and is gone. The onward message has no
	// MessageID, so only the commit's own replay keeps it single.
	{"RetryAfterLostReplyCommitsNothing", func(t *testing.T, h Harness) {
		k := effects(t, h)
		if k.in.EffectsRetry == nil {
			t.Skip("the implementation's commit has no reply to lose")
		}
		seq := k.send("in", outbox.Message{Body: k.body()})[0]
		m := k.one("in", seq)
		err := k.in.EffectsTx(k.ctx, func(ops EffectsOps) error {
			if _, err := ops.Send("out", outbox.Message{Body: m.Body}); err != nil {
				return err
			}
			return ops.Complete(m.Lock())
		})
		k.must(err, "move without a MessageID")
		k.must(k.in.EffectsRetry(k.ctx), "the same commit again")
		k.advance(lease)
		k.must(k.in.EffectsRetry(k.ctx), "the same commit again, past the lease")
		if got := k.peek("out"); len(got) != 1 {
			t.Fatalf("out holds %d messages after the retries, want the one moved", len(got))
		}
		k.gone(seq)
	}},
}
