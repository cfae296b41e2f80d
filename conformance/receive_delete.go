package conformance

import (
	"testing"

	"github.com/mqlite/mqlite"
)

var rad = mqlite.ReceiveOptions{Mode: mqlite.ReceiveAndDelete}

// receiveAndDeleteTests: receive-and-delete removes what it hands out in
// the same transaction, never more than Max and never a row it does not
// return; it grants no lease and keeps group order.
var receiveAndDeleteTests = []subtest{
	{"NeverMoreThanMaxNeverLoses", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 5)
		o := rad
		o.Max = 2
		k.expect("q", o, s[0], s[1])
		if st := k.stats("q"); st.Total() != 3 || st.Active != 3 {
			t.Fatalf("after taking 2 of 5: %+v, want 3 active", st)
		}
		o.Max = 1
		k.expect("q", o, s[2])
		o.Max = 10
		k.expect("q", o, s[3], s[4])
		if st := k.stats("q"); st.Total() != 0 {
			t.Fatalf("left: %+v", st)
		}
	}},
	{"GrantsNoLease", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.expect("q", rad, seq)[0]
		if m.LockToken != "" || !m.LockedUntil.IsZero() || m.DeliveryCount != 1 {
			t.Fatalf("receive-and-delete: token %q until %v count %d, want none, zero, 1",
				m.LockToken, m.LockedUntil, m.DeliveryCount)
		}
		k.advance(2 * lease)
		k.none("q")
	}},
	{"KeepsGroupOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		o := rad
		o.Max = 10
		k.expect("q", o, g[0])
		k.expect("q", o, g[1])
	}},
}
