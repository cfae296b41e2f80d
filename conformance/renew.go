package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// renewTests: Renew extends a running lease by LockDuration from now and
// never revives one that ended; each lock of RenewBatch has its own result.
var renewTests = []subtest{
	{"ExtendsFromNow", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 2)
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
		k.advance(10 * time.Second)
		until, err := k.st.Renew(k.ctx, msgs[0].Lock())
		k.must(err, "renew")
		if want := k.clock.Now().Add(lease); !until.Equal(want) {
			t.Fatalf("renewed until %v, want %v", until, want)
		}
		k.advance(lease - 10*time.Second) // the first lease's end
		k.must(k.st.Complete(k.ctx, msgs[0].Lock()), "complete past the first lease's end")
		k.wantErr(k.st.Complete(k.ctx, msgs[1].Lock()), mqlite.ErrLockLost, "complete of the unrenewed lease")
	}},
	{"ExpiredNeverRevived", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		k.advance(lease + time.Second)
		_, err := k.st.Renew(k.ctx, m.Lock())
		k.wantErr(err, mqlite.ErrLockLost, "renew of an ended lease")
		k.wantErr(k.st.Complete(k.ctx, m.Lock()), mqlite.ErrLockLost, "complete after a refused renew")
		if m2 := k.one("q", seq); m2.DeliveryCount != 2 {
			t.Fatalf("redelivery count %d, want 2", m2.DeliveryCount)
		}
	}},
	{"BatchEachOwnResult", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 2)
		msgs := k.expect("q", mqlite.ReceiveOptions{Max: 2}, s...)
		k.must(k.st.Complete(k.ctx, msgs[1].Lock()), "complete")
		k.advance(time.Second)
		res, err := k.st.RenewBatch(k.ctx, []mqlite.Lock{msgs[0].Lock(), msgs[1].Lock()})
		k.must(err, "renew batch")
		if len(res) != 2 || res[0].Err != nil || !res[0].LockedUntil.Equal(k.clock.Now().Add(lease)) {
			t.Fatalf("live lock: %+v", res)
		}
		k.wantErr(res[1].Err, mqlite.ErrLockLost, "renew of a settled lock")
	}},
}
