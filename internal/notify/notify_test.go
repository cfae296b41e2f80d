package notify

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestNotifier: which transaction endings wake which waiters.
func TestNotifier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		plan int64 // 0: the waiter has not planned yet
		tx   func(n *Notifier)
		wake bool
	}{
		{"claimable commit", 100, func(n *Notifier) { n.Mark("q"); n.Commit() }, true},
		{"claimable rollback", 100, func(n *Notifier) { n.Mark("q"); n.Rollback(); n.Commit() }, false},
		{"other queue", 100, func(n *Notifier) { n.Mark("other"); n.Due("other", 1); n.Commit() }, false},
		{"earlier due moment", 100, func(n *Notifier) { n.Due("q", 50); n.Commit() }, true},
		{"later due moment", 100, func(n *Notifier) { n.Due("q", 150); n.Commit() }, false},
		{"equal due moment", 100, func(n *Notifier) { n.Due("q", 100); n.Commit() }, false},
		{"due moment before the plan", 0, func(n *Notifier) { n.Due("q", 150); n.Commit() }, true},
		{"due moment rolled back", 100, func(n *Notifier) { n.Due("q", 50); n.Rollback(); n.Commit() }, false},
		{"close", 100, func(n *Notifier) { n.WakeAll() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := New()
			w := n.Wait("q")
			if tc.plan > 0 {
				w.Plan(tc.plan)
			}
			tc.tx(n)
			if got := closed(w.C()); got != tc.wake {
				t.Fatalf("woken %v, want %v", got, tc.wake)
			}
		})
	}
}

// TestWaiterLeaves: a waiter that left no longer counts as unplanned, so a
// later due moment does not wake the planned ones.
func TestWaiterLeaves(t *testing.T) {
	t.Parallel()
	n := New()
	a, b := n.Wait("q"), n.Wait("q")
	a.Plan(100)
	b.Leave()
	b.Leave() // idempotent
	n.Due("q", 200)
	n.Commit()
	if closed(a.C()) {
		t.Fatal("a due moment after every plan woke the waiter")
	}
}
