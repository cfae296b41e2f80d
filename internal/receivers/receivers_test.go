package receivers

import (
	"sort"
	"testing"
	"time"
)

// msg is a delivery of the tests: its lease as is.
type msg = Lease

func newRegistry(now *int64) *Registry[string, msg] {
	return New[string](func() int64 { return *now }, 5*time.Second, func(m msg) Lease { return m })
}

func list(r *Registry[string, msg]) []Entry[string] {
	out := r.List()
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// TestEnterLeaveHold: a Receive waits while it runs; its deliveries hold
// leases until settled or past their end; an idle receiver is listed for
// the grace, then forgotten.
func TestEnterLeaveHold(t *testing.T) {
	now := int64(1000)
	r := newRegistry(&now)
	a := ID[string]{Queue: "q", Tag: "a"}
	r.Enter(a)
	if got := list(r); len(got) != 1 || got[0].Waiting != 1 || got[0].LastSeen != 1000 {
		t.Fatalf("entered: %+v", got)
	}
	now = 2000
	r.Leave(a, []msg{{Token: "t1", Seq: 1, Until: 9000}, {Token: "t2", Seq: 2, Until: 3000}, {Seq: 3}})
	if got := list(r); len(got) != 1 || got[0].Waiting != 0 || got[0].Locks != 2 || got[0].LastSeen != 2000 {
		t.Fatalf("left: %+v", got)
	}
	now = 3000 // t2's lease ends
	if got := list(r); got[0].Locks != 1 {
		t.Fatalf("lapsed lease still counted: %+v", got)
	}
	r.Settled("q", 99, "t1") // another seq: releases nothing
	r.Settled("other", 1, "t1")
	if live, locks := r.Size(); live != 1 || locks != 1 {
		t.Fatalf("size %d %d", live, locks)
	}
	r.Renewed("q", 1, "t1", 20000)
	now = 10000 // past t1's first end, within its renewal; idle past the grace
	if got := list(r); len(got) != 1 || got[0].Locks != 1 {
		t.Fatalf("renewed lease: %+v", got)
	}
	r.Settled("q", 1, "t1")
	if got := list(r); len(got) != 0 {
		t.Fatalf("idle receiver past the grace still listed: %+v", got)
	}
}

// TestReceivedPruneDrop: a ReceiveDeferred's delivery counts; Prune drops
// gone receivers without listing; DropQueue forgets a queue's receivers.
func TestReceivedPruneDrop(t *testing.T) {
	now := int64(0)
	r := newRegistry(&now)
	a, b := ID[string]{Queue: "q", Tag: "a"}, ID[string]{Queue: "r", Tag: "b"}
	r.Received(a, msg{Token: "t", Seq: 1, Until: 100})
	r.Enter(b)
	r.Leave(b, nil)
	now = 5000
	r.Prune(now)
	if live, locks := r.Size(); live != 0 || locks != 0 {
		t.Fatalf("after prune: %d %d", live, locks)
	}
	r.Enter(a)
	r.Leave(a, []msg{{Token: "u", Seq: 2, Until: 1 << 40}})
	r.Enter(b)
	r.DropQueue("q")
	r.DropQueue("r") // b waits: kept
	got := list(r)
	if len(got) != 1 || got[0].Tag != "b" || got[0].Waiting != 1 {
		t.Fatalf("after drop: %+v", got)
	}
	if _, locks := r.Size(); locks != 0 {
		t.Fatalf("dropped queue's leases kept: %d", locks)
	}
}

// TestSettledInTx: settlements inside a transaction apply on its commit
// only; a step's are undone with it.
func TestSettledInTx(t *testing.T) {
	now := int64(0)
	r := newRegistry(&now)
	a := ID[string]{Queue: "q", Tag: "a"}
	r.Leave(a, []msg{{Token: "t1", Seq: 1, Until: 100}, {Token: "t2", Seq: 2, Until: 100}, {Token: "t3", Seq: 3, Until: 100}})
	r.SettledInTx(0, "q", 1, "t1")
	r.RolledBack(0)
	r.SettledInTx(0, "q", 2, "t2")
	m := r.MarkInTx(0)
	r.SettledInTx(0, "q", 3, "t3")
	r.UndoInTx(0, m)
	if _, locks := r.Size(); locks != 3 {
		t.Fatalf("applied before the commit: %d locks", locks)
	}
	r.Committed(0)
	if _, locks := r.Size(); locks != 2 {
		t.Fatalf("after the commit: %d locks, want 2 (t1, t3)", locks)
	}
	r.Settled("q", 1, "t1")
	r.Settled("q", 3, "t3")
	if _, locks := r.Size(); locks != 0 {
		t.Fatalf("%d locks", locks)
	}
}

// TestInTxKeysApart: on a store whose transactions run at once (a pool),
// each transaction's settlements wait under its own key: a rollback beside
// a commit neither drops nor applies the other's, and a step's undo
// touches its own key's only.
func TestInTxKeysApart(t *testing.T) {
	now := int64(0)
	r := newRegistry(&now)
	a := ID[string]{Queue: "q", Tag: "a"}
	r.Leave(a, []msg{{Token: "t1", Seq: 1, Until: 100}, {Token: "t2", Seq: 2, Until: 100}, {Token: "t3", Seq: 3, Until: 100}})
	r.SettledInTx(1, "q", 1, "t1")
	m := r.MarkInTx(2)
	r.SettledInTx(2, "q", 2, "t2")
	r.SettledInTx(3, "q", 3, "t3")
	r.UndoInTx(2, m) // key 2's step rolled back: t2 stays held, t1 waits
	r.RolledBack(3)  // t3 stays held, t1 waits
	r.Committed(2)   // nothing of key 2's is left
	if _, locks := r.Size(); locks != 3 {
		t.Fatalf("%d locks before key 1 committed, want 3", locks)
	}
	r.Committed(1)
	if _, locks := r.Size(); locks != 2 {
		t.Fatalf("%d locks, want t2 and t3 still held", locks)
	}
	if n := r.PendingInTx(); n != 0 {
		t.Fatalf("%d transactions pending", n)
	}
}
