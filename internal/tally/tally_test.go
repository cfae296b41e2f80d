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
	tl.Change(Change{Queue: "q", New: "active", Bytes: 10})
	tl.Change(Change{Queue: "q", New: "active", Bytes: 5})
	if q := queue(t, tl, "q"); q.Active != 0 {
		t.Fatalf("counted before the commit: %+v", q)
	}
	tl.Commit()
	tl.Tag(Receive)
	tl.Change(Change{Queue: "q", Old: "active", New: "locked", Bytes: 10})
	tl.Commit()
	tl.Tag(Complete)
	tl.Change(Change{Queue: "q", Old: "locked", Bytes: 10})
	tl.Rollback()
	q := queue(t, tl, "q")
	want := Counters{Sent: 2, Received: 1}
	if q.Active != 1 || q.Locked != 1 || q.Bytes != 15 || q.Counters != want {
		t.Fatalf("got %+v", q)
	}
	tl.Tag(Abandon)
	tl.Change(Change{Queue: "q", Old: "locked", New: "active", Bytes: 10})
	tl.Commit()
	tl.Change(Change{Queue: "q", Old: "active", New: "locked", Bytes: 10})
	tl.Change(Change{Queue: "q", Old: "locked", New: "dead_lettered", Bytes: 10}) // no cause: the reaper
	tl.Commit()
	q = queue(t, tl, "q")
	want = Counters{Sent: 2, Received: 2, Abandoned: 1, LockLost: 1, DeadLettered: 1}
	if q.Active != 1 || q.DeadLettered != 1 || q.Counters != want {
		t.Fatalf("got %+v", q)
	}
}

// TestOffUntilSeeded: rows before Seed (migrations, recovery) count nothing.
func TestOffUntilSeeded(t *testing.T) {
	var tl Tally
	tl.Change(Change{Queue: "q", New: "active"})
	tl.Create("q")
	tl.Commit()
	tl.Seed(nil)
	if got := tl.Names(); len(got) != 0 {
		t.Fatalf("names %v", got)
	}
}

// TestMarkUndo: a step rolled back to its savepoint takes its rows (and
// queues created) out of the pending counts; the step before stays.
func TestMarkUndo(t *testing.T) {
	tl := seeded()
	tl.Change(Change{Queue: "q", New: "active", Bytes: 1})
	m := tl.Mark()
	tl.Tag(Receive)
	tl.Change(Change{Queue: "q", New: "active", Bytes: 1})
	tl.Create("r")
	tl.Change(Change{Queue: "r", New: "active", Bytes: 1})
	tl.Undo(m)
	tl.Commit()
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
	tl.Change(Change{Queue: "q", New: "active", Bytes: 1})
	tl.Correct("q", e)
	tl.Change(Change{Queue: "q", New: "active", Bytes: 1})
	tl.Commit()
	if q := queue(t, tl, "q"); q.Active != 8 || q.Bytes != 76 {
		t.Fatalf("q %+v", q)
	}
}

func TestRedeliveredCreateDropPaused(t *testing.T) {
	tl := seeded()
	tl.Redelivered("q", 1) // nothing received: nothing counted
	tl.Tag(Receive)
	tl.Change(Change{Queue: "q", Old: "active", New: "locked"})
	tl.Redelivered("q", 1)
	tl.Create("r")
	tl.Commit()
	if c := tl.Counters("q"); c.Redelivered != 1 || c.Received != 1 {
		t.Fatalf("counters %+v", c)
	}
	tl.Paused("r", true)
	if q := queue(t, tl, "r"); !q.Paused {
		t.Fatalf("r %+v", q)
	}
	tl.Drop("r")
	tl.Commit()
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
