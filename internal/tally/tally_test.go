package tally

import (
	"slices"
	"testing"
	"time"
)

func seeded() *Tally {
	var t Tally
	t.Seed([]Seed{{Queue: "q"}})
	return &t
}

func queue(t *testing.T, tl *Tally, name string) Queue {
	t.Helper()
	for _, q := range tl.Snapshot() {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("no queue %q", name)
	return Queue{}
}

// TestCountsFollowCommits: a transaction's rows count once it commits, and
// not at all when it rolls back; the cause names a lock's end.
func TestCountsFollowCommits(t *testing.T) {
	tl := seeded()
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 10})
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 5})
	if q := queue(t, tl, "q"); q.Active != 0 {
		t.Fatalf("counted before the commit: %+v", q)
	}
	tl.Commit(0)
	tl.Tag(Receive)
	tl.Change(0, Change{Queue: "q", Old: "active", New: "locked", Bytes: 10})
	tl.Commit(0)
	tl.Tag(Complete)
	tl.Change(0, Change{Queue: "q", Old: "locked", Bytes: 10})
	tl.Rollback(0)
	q := queue(t, tl, "q")
	want := Counters{Sent: 2, Received: 1}
	if q.Active != 1 || q.Locked != 1 || q.Bytes != 15 || q.Counters != want {
		t.Fatalf("got %+v", q)
	}
	tl.Tag(Abandon)
	tl.Change(0, Change{Queue: "q", Old: "locked", New: "active", Bytes: 10})
	tl.Commit(0)
	tl.Change(0, Change{Queue: "q", Old: "active", New: "locked", Bytes: 10})
	tl.Change(0, Change{Queue: "q", Old: "locked", New: "dead_lettered", Bytes: 10}) // no cause: the reaper
	tl.Commit(0)
	q = queue(t, tl, "q")
	want = Counters{Sent: 2, Received: 2, Abandoned: 1, LockLost: 1, DeadLettered: 1}
	if q.Active != 1 || q.DeadLettered != 1 || q.Counters != want {
		t.Fatalf("got %+v", q)
	}
}

// TestOffUntilSeeded: rows before Seed (migrations, recovery) count nothing.
func TestOffUntilSeeded(t *testing.T) {
	var tl Tally
	tl.Change(0, Change{Queue: "q", New: "active"})
	tl.Create(0, "q")
	tl.Commit(0)
	tl.Seed(nil)
	if got := tl.Names(); len(got) != 0 {
		t.Fatalf("names %v", got)
	}
}

// TestMarkUndo: a step rolled back to its savepoint takes its rows (and
// queues created) out of the pending counts; the step before stays.
func TestMarkUndo(t *testing.T) {
	tl := seeded()
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 1})
	m := tl.Mark()
	tl.Tag(Receive)
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 1})
	tl.Create(0, "r")
	tl.Change(0, Change{Queue: "r", New: "active", Bytes: 1})
	tl.Undo(m)
	tl.Commit(0)
	if q := queue(t, tl, "q"); q.Active != 1 || q.Counters.Sent != 1 {
		t.Fatalf("q %+v", q)
	}
	if got := tl.Names(); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("names %v", got)
	}
}

// TestCorrect: counts read from the table replace the tally's, at once
// when the transaction wrote nothing to the queue, at its commit
// (moved by its later writes) otherwise.
func TestCorrect(t *testing.T) {
	tl := seeded()
	var e Exact
	e.Put("active", 7, 70)
	e.Put("weird", 3, 5)
	tl.Correct("q", e)
	if q := queue(t, tl, "q"); q.Active != 7 || q.Bytes != 75 {
		t.Fatalf("q %+v", q)
	}
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 1})
	tl.Correct("q", e)
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 1})
	tl.Commit(0)
	if q := queue(t, tl, "q"); q.Active != 8 || q.Bytes != 76 {
		t.Fatalf("q %+v", q)
	}
}

func TestRedeliveredCreateDropPaused(t *testing.T) {
	tl := seeded()
	tl.Redelivered("q", 1) // nothing received: nothing counted
	tl.Tag(Receive)
	tl.Change(0, Change{Queue: "q", Old: "active", New: "locked"})
	tl.Redelivered("q", 1)
	tl.Create(0, "r")
	tl.Commit(0)
	if c := tl.Counters("q"); c.Redelivered != 1 || c.Received != 1 {
		t.Fatalf("counters %+v", c)
	}
	tl.Paused("r", true)
	if q := queue(t, tl, "r"); !q.Paused {
		t.Fatalf("r %+v", q)
	}
	tl.Drop(0, "r")
	tl.Commit(0)
	if got := tl.Names(); !slices.Equal(got, []string{"q"}) {
		t.Fatalf("names %v", got)
	}
	if c := tl.Counters("r"); c != (Counters{}) {
		t.Fatalf("dropped queue's counters %+v", c)
	}
}

// TestObserve: durations land in the bucket of their upper bound,
// cumulatively, and an unknown queue is skipped.
func TestObserve(t *testing.T) {
	tl := seeded()
	tl.Observe("q", Claim, time.Now())
	tl.Observe("q", Settle, time.Now().Add(-time.Minute))
	tl.Observe("nope", Claim, time.Now())
	q := queue(t, tl, "q")
	if q.Claim.Count != 1 || q.Claim.Buckets[len(Buckets)-1] != 1 || len(q.Claim.Buckets) != len(Buckets) {
		t.Fatalf("claim %+v", q.Claim)
	}
	if q.Settle.Count != 1 || q.Settle.Buckets[len(Buckets)-1] != 0 || q.Settle.Sum < time.Minute {
		t.Fatalf("settle %+v", q.Settle)
	}
}

// TestKeysApart: on a pool, transactions run side by side; each key's
// rollback drops its own changes and no other's, each commit applies its
// own, and a step's Undo of one key leaves the other's alone.
func TestKeysApart(t *testing.T) {
	var tl Tally
	tl.Seed([]Seed{{Queue: "q"}})
	tl.Change(1, Change{Queue: "q", New: "active", Bytes: 3})
	tl.Change(2, Change{Queue: "q", New: "active", Bytes: 5})
	tl.Create(2, "r")
	tl.Change(0, Change{Queue: "q", New: "active", Bytes: 7})
	m := tl.MarkKey(1)
	tl.Change(1, Change{Queue: "q", New: "active", Bytes: 100})
	tl.Change(2, Change{Queue: "q", New: "scheduled", Bytes: 11})
	tl.UndoKey(1, m) // key 1's step rolled back to its savepoint
	tl.Rollback(2)   // key 2's whole transaction
	if got := tl.Snapshot(); len(got) != 1 || got[0].Active != 0 {
		t.Fatalf("before any commit: %+v", got)
	}
	tl.Commit(1)
	tl.Commit(0)
	got := tl.Snapshot()
	if len(got) != 1 || got[0].Active != 2 || got[0].Scheduled != 0 || got[0].Bytes != 10 || got[0].Counters.Sent != 2 {
		t.Fatalf("after the commits of keys 1 and 0, key 2 rolled back: %+v", got)
	}
	if n := tl.Pending(); n != 0 {
		t.Fatalf("%d transactions left pending", n)
	}
}

// TestRedeliveredWithTheRows: a claim whose rows tell their redeliveries
// (PostgreSQL) counts them with its transaction: on its commit, never on
// its rollback, whatever claims beside it on the queue; a receive-and-delete
// counts too.
func TestRedeliveredWithTheRows(t *testing.T) {
	tl := seeded()
	for range 4 {
		tl.Change(1, Change{Queue: "q", New: "active"})
	}
	tl.Commit(1)
	tl.Change(2, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive, Redelivered: true})
	tl.Change(3, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive, Redelivered: true})
	tl.Change(3, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive})
	tl.Rollback(2)
	tl.Commit(3)
	tl.Change(4, Change{Queue: "q", Old: "active", Cause: Receive, Redelivered: true}) // receive-and-delete
	tl.Commit(4)
	q := queue(t, tl, "q")
	want := Counters{Sent: 4, Received: 3, Redelivered: 2}
	if q.Counters != want {
		t.Fatalf("counters %+v, want %+v", q.Counters, want)
	}
}

// TestTagNamesNoKeyedChange: on a pool a Tag (a store call that cannot
// name its transaction) names no change of another key: a lease a sweep
// ends beside an Abandon and a row a purge deletes beside a
// receive-and-delete count as having no cause, while the changes that
// tell their own cause or their transaction's count by it.
func TestTagNamesNoKeyedChange(t *testing.T) {
	tl := seeded()
	tl.Change(1, Change{Queue: "q", New: "active"})
	tl.Change(1, Change{Queue: "q", New: "active"})
	tl.Change(1, Change{Queue: "q", New: "active"})
	tl.Commit(1)
	tl.Change(2, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive})
	tl.Change(2, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive})
	tl.Commit(2)
	tl.Tag(Abandon)                                                // a settlement's call on the pool
	tl.Change(3, Change{Queue: "q", Old: "locked", New: "active"}) // a sweep: the lease lapsed
	tl.Commit(3)
	tl.Change(4, Change{Queue: "q", Old: "locked", New: "active", Cause: Abandon}) // the settlement's own row
	tl.Commit(4)
	tl.Tag(Receive)
	tl.Change(5, Change{Queue: "q", Old: "active"}) // a purge
	tl.Commit(5)
	tl.TagKey(6, Reject)
	tl.Change(6, Change{Queue: "q", Old: "active", New: "locked", Cause: Receive})
	tl.Change(6, Change{Queue: "q", Old: "locked", New: "dead_lettered"}) // its transaction's cause
	tl.Commit(6)
	q := queue(t, tl, "q")
	want := Counters{Sent: 3, Received: 3, Abandoned: 1, LockLost: 1, Rejected: 1, DeadLettered: 1}
	if q.Counters != want {
		t.Fatalf("counters %+v, want %+v", q.Counters, want)
	}
}
