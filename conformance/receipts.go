package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// receiptTests: the exact same settlement retried after it succeeded
// succeeds again from its receipt, for about 30 minutes; a receipt vouches
// for nothing else: not another operation, other arguments, another token
// or message, an expired receipt (with no janitor run), nor a renewal
// (docs/conformance.md, "Settlement receipts").
func receiptTests() []subtest {
	var out []subtest
	for i, op := range settleOps {
		other := settleOps[(i+1)%len(settleOps)]
		out = append(out,
			subtest{op.name + "ReplaysExactRequest", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				k.must(op.do(k, m.Lock()), op.name)
				k.must(op.do(k, m.Lock()), op.name+" retried at once")
				k.advance(2 * lease) // the original lease is long over
				k.must(op.do(k, m.Lock()), op.name+" retried after the lease ended")
				k.advance(replayWindow - 2*lease - time.Second)
				k.must(op.do(k, m.Lock()), op.name+" retried inside the replay window")
			}},
			subtest{op.name + "ReceiptExpires", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{LockDuration: time.Hour})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				k.must(op.do(k, m.Lock()), op.name)
				k.advance(replayWindow + time.Second) // no janitor has run
				k.wantErr(op.do(k, m.Lock()), mqlite.ErrLockLost, op.name+" retried after its receipt expired")
			}},
			subtest{op.name + "ThenOtherOperationRefused", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				k.must(op.do(k, m.Lock()), op.name)
				k.wantErr(other.do(k, m.Lock()), mqlite.ErrLockLost, other.name+" after "+op.name)
			}},
			subtest{op.name + "ReceiptIsNotAnotherToken", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				s := k.sendN("q", 2)
				msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
				k.must(op.do(k, msgs[0].Lock()), op.name)
				// The token of the settled delivery vouches neither for
				// another token of its message nor for another message.
				l := msgs[0].Lock()
				l.Token = msgs[1].LockToken
				k.wantErr(op.do(k, l), mqlite.ErrLockLost, op.name+" with another delivery's token")
				l = msgs[0].Lock()
				l.Seq = msgs[1].Seq
				k.wantErr(op.do(k, l), mqlite.ErrLockLost, op.name+" of another message with a settled token")
				k.must(k.st.Complete(k.ctx, msgs[1].Lock()), "the other message is untouched")
			}},
			subtest{op.name + "ReceiptRenewsNothing", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				k.must(op.do(k, m.Lock()), op.name)
				_, err := k.st.Renew(k.ctx, m.Lock())
				k.wantErr(err, mqlite.ErrLockLost, "renew after "+op.name)
				k.advance(lease)
				k.must(op.do(k, m.Lock()), op.name+" replayed after the lease ended")
				_, err = k.st.Renew(k.ctx, m.Lock())
				k.wantErr(err, mqlite.ErrLockLost, "renew of an expired lease after a replay")
			}},
		)
	}
	out = append(out,
		subtest{"AbandonOtherDelayRefused", func(t *testing.T, h Harness) {
			k := open(t, h)
			k.queue("q", mqlite.QueueOptions{})
			m := k.one("q", k.sendN("q", 1)[0])
			k.must(k.st.Abandon(k.ctx, m.Lock(), time.Second), "abandon 1s")
			k.wantErr(k.st.Abandon(k.ctx, m.Lock(), 2*time.Second), mqlite.ErrLockLost, "abandon 2s after abandon 1s")
			k.wantErr(k.st.Abandon(k.ctx, m.Lock(), 0), mqlite.ErrLockLost, "abandon 0 after abandon 1s")
		}},
		subtest{"RejectOtherReasonRefused", func(t *testing.T, h Harness) {
			k := open(t, h)
			k.queue("q", mqlite.QueueOptions{})
			m := k.one("q", k.sendN("q", 1)[0])
			k.must(k.st.Reject(k.ctx, m.Lock(), "r", "d"), "reject")
			k.wantErr(k.st.Reject(k.ctx, m.Lock(), "r2", "d"), mqlite.ErrLockLost, "reject with another reason")
			k.wantErr(k.st.Reject(k.ctx, m.Lock(), "r", "d2"), mqlite.ErrLockLost, "reject with another description")
			k.wantErr(k.st.Reject(k.ctx, m.Lock(), "r d", ""), mqlite.ErrLockLost, "reject with the fields run together")
		}},
		// A replay answers from the receipt and changes nothing: the
		// message delivered again since stays with its new holder.
		subtest{"ReplayHasNoEffect", func(t *testing.T, h Harness) {
			k := open(t, h)
			k.queue("q", mqlite.QueueOptions{})
			seq := k.sendN("q", 1)[0]
			first := k.one("q", seq)
			k.must(k.st.Abandon(k.ctx, first.Lock(), 0), "abandon")
			second := k.one("q", seq)
			k.must(k.st.Abandon(k.ctx, first.Lock(), 0), "abandon replayed")
			k.none("q")
			k.must(k.st.Defer(k.ctx, second.Lock()), "defer")
			third, err := k.st.ReceiveDeferred(k.ctx, "q", seq)
			k.must(err, "receive deferred")
			k.must(k.st.Defer(k.ctx, second.Lock()), "defer replayed")
			k.must(k.st.Complete(k.ctx, third.Lock()), "the current holder completes")
			if p := k.peek("q"); len(p) != 0 {
				t.Fatalf("left after complete: %+v", p)
			}
		}},
	)
	return out
}
