package conformance

import (
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
)

// fencingTests: every settlement and renewal needs the current token, the
// right queue and a lease that has not ended; equality at the deadline is
// already ended, whether or not anything has swept the lease
// (docs/conformance.md, "Fencing").
func fencingTests() []subtest {
	var out []subtest
	for _, op := range fenceOps() {
		out = append(out,
			// At LockDuration-1ms the delivery is live; at exactly
			// LockDuration it is over, with no sweep having run.
			subtest{op.name + "AtExactDeadline", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				s := k.sendN("q", 2)
				msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
				k.advance(lease - 1)
				k.must(op.do(k, msgs[0].Lock()), op.name+" 1ms before the deadline")
				k.advance(1)
				k.wantErr(op.do(k, msgs[1].Lock()), mqlite.ErrLockLost, op.name+" at the exact deadline")
				// The refused delivery changed nothing: it comes again.
				if m := k.one("q", s[1]); m.DeliveryCount != 2 {
					t.Fatalf("redelivery count %d, want 2", m.DeliveryCount)
				}
			}},
			// After the lease ended and the message was delivered again,
			// the old token is refused and the new one works.
			subtest{op.name + "StaleToken", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				old := k.one("q", seq)
				k.advance(lease)
				cur := k.one("q", seq)
				k.wantErr(op.do(k, old.Lock()), mqlite.ErrLockLost, op.name+" with the previous delivery's token")
				k.must(k.st.Complete(k.ctx, cur.Lock()), "complete with the current token")
			}},
			// A token that was never handed out is refused.
			subtest{op.name + "WrongToken", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				l := m.Lock()
				l.Token = strings.Repeat("0", len(l.Token))
				if l.Token == m.LockToken {
					l.Token = strings.Repeat("f", len(l.Token))
				}
				k.wantErr(op.do(k, l), mqlite.ErrLockLost, op.name+" with a made-up token")
				k.must(k.st.Complete(k.ctx, m.Lock()), "complete with the real token")
			}},
			// A lock presented on another queue is refused, even with the
			// right seq and token.
			subtest{op.name + "WrongQueue", func(t *testing.T, h Harness) {
				k := open(t, h)
				k.queue("q", mqlite.QueueOptions{})
				k.queue("other", mqlite.QueueOptions{})
				seq := k.sendN("q", 1)[0]
				m := k.one("q", seq)
				l := m.Lock()
				l.Queue = "other"
				k.wantErr(op.do(k, l), mqlite.ErrLockLost, op.name+" on another queue")
				k.must(k.st.Complete(k.ctx, m.Lock()), "complete on the right queue")
			}},
		)
	}
	return out
}
