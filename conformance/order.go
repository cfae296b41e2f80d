package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// group sends n messages of group g to queue and returns their seqs.
func (k *kit) group(queue, g string, n int) []int64 {
	k.t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i].GroupID = g
	}
	return k.send(queue, msgs...)
}

var max10 = mqlite.ReceiveOptions{Max: 10}

// orderTests: no message of a group is handed out while an earlier one of
// the group is locked (even past its lease), deferred or scheduled; groups
// are independent; a FIFO queue is one group (docs/concepts.md, "Order").
var orderTests = []subtest{
	{"BatchTakesOnePerGroup", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		u := k.sendN("q", 1)
		hh := k.group("q", "H", 2)
		k.expect("q", max10, g[0], u[0], hh[0])
		k.none("q")
	}},
	{"GroupAcrossLeaseExpiry", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 3)
		k.expect("q", max10, g[0])
		k.advance(lease - 1)
		k.none("q")
		k.advance(1) // the lease lapsed; no sweep ran
		if m := k.expect("q", max10, g[0]); m[0].DeliveryCount != 2 {
			t.Fatalf("the lapsed head came back with count %d, want 2", m[0].DeliveryCount)
		}
	}},
	{"GroupAcrossAbandon", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 3)
		m := k.expect("q", max10, g[0])
		k.must(k.st.Abandon(k.ctx, m[0].Lock(), 0), "abandon")
		m = k.expect("q", max10, g[0])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.expect("q", max10, g[1])
	}},
	{"GroupAcrossRelease", func(t *testing.T, h Harness) {
		// A released head (consumer.Releaser) is the group's head again at
		// once with its delivery not counted: on a queue of one delivery
		// each it is never a dead letter.
		k := open(t, h)
		r := optional[consumer.Releaser](k, "consumer.Releaser")
		k.queue("q", mqlite.QueueOptions{MaxDeliveryCount: 1})
		g := k.group("q", "G", 2)
		for range 2 {
			m := k.expect("q", max10, g[0])
			k.must(r.Release(k.ctx, m[0].Lock()), "release")
		}
		m := k.expect("q", max10, g[0])
		if m[0].DeliveryCount != 1 {
			t.Fatalf("the released head came back with count %d, want 1", m[0].DeliveryCount)
		}
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.expect("q", max10, g[1])
	}},
	{"GroupAcrossAbandonDelay", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		m := k.expect("q", max10, g[0])
		k.must(k.st.Abandon(k.ctx, m[0].Lock(), time.Minute), "abandon with a delay")
		k.advance(time.Minute - 1)
		k.none("q")
		k.advance(1)
		k.expect("q", max10, g[0])
	}},
	{"GroupAcrossDefer", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		m := k.expect("q", max10, g[0])
		k.must(k.st.Defer(k.ctx, m[0].Lock()), "defer")
		k.none("q")
		k.advance(2 * lease)
		k.none("q")
		d, err := k.st.ReceiveDeferred(k.ctx, "q", g[0])
		k.must(err, "receive deferred")
		k.none("q")
		k.must(k.st.Complete(k.ctx, d.Lock()), "complete")
		k.expect("q", max10, g[1])
	}},
	{"GroupAcrossSchedule", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.send("q", outbox.Message{GroupID: "G", DeliverAt: k.clock.Now().Add(time.Minute)},
			outbox.Message{GroupID: "G"})
		k.none("q")
		k.advance(time.Minute)
		m := k.expect("q", max10, s[0])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.expect("q", max10, s[1])
	}},
	{"GroupReleasedByRejectAndComplete", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 3)
		m := k.expect("q", max10, g[0])
		k.must(k.st.Reject(k.ctx, m[0].Lock(), "r", ""), "reject")
		m = k.expect("q", max10, g[1])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.expect("q", max10, g[2])
	}},
	{"GroupsAreIndependent", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		g := k.group("q", "G", 2)
		k.expect("q", max10, g[0])
		hh := k.group("q", "H", 1)
		u := k.sendN("q", 1)
		k.expect("q", max10, hh[0], u[0])
	}},
	{"FIFOQueueIsOneGroup", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{Ordering: mqlite.FIFO})
		s := k.sendN("q", 3)
		m := k.expect("q", max10, s[0])
		k.none("q")
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		k.expect("q", max10, s[1])
	}},
	// An ungrouped redriven message takes its place in sequence order.
	{"RedriveKeepsSequenceOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 3)
		m := k.one("q", s[0])
		k.must(k.st.Reject(k.ctx, m.Lock(), "r", ""), "reject")
		n, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{})
		if err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		k.expect("q", max10, s...)
	}},
	// A redriven member never overtakes a member in flight: it waits
	// while the later member is locked and goes next once that one is
	// settled, so a group's order survives a redrive.
	{"RedriveWaitsBehindLockedMember", func(t *testing.T, h Harness) {
		k, g, m2 := redriveBehindFront(t, h)
		k.must(k.st.Complete(k.ctx, m2.Lock()), "complete g2")
		m := k.expect("q", max10, g[0])
		k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete g1")
		k.expect("q", max10, g[2])
	}},
	// When the member in flight comes back to active (abandoned), the
	// redriven earlier member goes first: the group resumes in sequence
	// order.
	{"RedriveRejoinsInSequenceOrder", func(t *testing.T, h Harness) {
		k, g, m2 := redriveBehindFront(t, h)
		k.must(k.st.Abandon(k.ctx, m2.Lock(), 0), "abandon g2")
		for _, seq := range g {
			m := k.expect("q", max10, seq)
			k.must(k.st.Complete(k.ctx, m[0].Lock()), "complete")
		}
	}},
	// A redriven member waits behind a deferred or scheduled member too.
	{"RedriveWaitsBehindDeferredMember", func(t *testing.T, h Harness) {
		k, g, _ := redriveBehindFront(t, h, func(k *kit, m mqlite.Message) {
			k.must(k.st.Defer(k.ctx, m.Lock()), "defer g2")
		})
		d, err := k.st.ReceiveDeferred(k.ctx, "q", g[1])
		k.must(err, "receive deferred g2")
		k.none("q")
		k.must(k.st.Complete(k.ctx, d.Lock()), "complete g2")
		k.expect("q", max10, g[0])
	}},
}

// redriveBehindFront sends g1, g2, g3 of group G to queue q, dead-letters
// g1, takes g2 (and applies then to it, if given) and redrives g1; it
// checks that nothing of the group is handed out then.
func redriveBehindFront(t *testing.T, h Harness, then ...func(*kit, mqlite.Message)) (*kit, []int64, mqlite.Message) {
	t.Helper()
	k := open(t, h)
	k.queue("q", mqlite.QueueOptions{})
	g := k.group("q", "G", 3)
	m1 := k.expect("q", max10, g[0])
	k.must(k.st.Reject(k.ctx, m1[0].Lock(), "r", ""), "reject g1")
	m2 := k.expect("q", max10, g[1])[0]
	for _, f := range then {
		f(k, m2)
	}
	_, err := k.st.Redrive(k.ctx, "q", mqlite.RedriveOptions{})
	k.must(err, "redrive")
	k.none("q")
	return k, g, m2
}
