package mqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// settledFixture is a store whose queues hold completed messages (rows in
// state completed, the receipts of their completions) beside live ones:
// on "q", the oldest message is completed and one of each other state
// stays; on the FIFO queue "f", the front of group g is completed, which
// released the next member.
type settledFixture struct {
	b         *testdb.Bundle
	completed map[string][]int64 // per queue, the completed seqs
	live      map[string]int64   // per queue, how many messages any read may show
}

func newSettledFixture(t *testing.T) settledFixture {
	t.Helper()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.Queue(t, "f", mqlite.QueueOptions{Ordering: mqlite.FIFO})
	f := settledFixture{b: b, completed: map[string][]int64{}, live: map[string]int64{}}
	receive := func(queue string) mqlite.Message {
		t.Helper()
		ms, err := b.Store.Receive(ctx, queue, mqlite.ReceiveOptions{})
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive %s: %d messages, %v", queue, len(ms), err)
		}
		return ms[0]
	}
	complete := func(queue string, m mqlite.Message) {
		t.Helper()
		if err := b.Store.Complete(ctx, m.Lock()); err != nil {
			t.Fatal(err)
		}
		f.completed[queue] = append(f.completed[queue], m.Seq)
	}

	// q: the oldest message completed a minute before the others were sent,
	// then one message in each live state.
	b.Send(t, "q", outbox.Message{MessageID: "done", Subject: "order.done"})
	complete("q", receive("q"))
	b.Clock.Advance(time.Minute)
	b.Send(t, "q", outbox.Message{Subject: "order.locked"}, outbox.Message{Subject: "order.deferred"},
		outbox.Message{Subject: "order.dead"}, outbox.Message{Subject: "order.active"},
		outbox.Message{Subject: "order.later", DeliverAt: b.Clock.Now().Add(time.Hour)})
	receive("q") // locked
	if err := b.Store.Defer(ctx, receive("q").Lock()); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Reject(ctx, receive("q").Lock(), "bad", "a dead letter"); err != nil {
		t.Fatal(err)
	}
	f.live["q"] = 5

	// f: g's front completed; g's second member active, its third held.
	b.Send(t, "f", outbox.Message{GroupID: "g", MessageID: "g-1"}, outbox.Message{GroupID: "g"},
		outbox.Message{GroupID: "g"})
	complete("f", receive("f"))
	f.live["f"] = 2
	b.Clock.Advance(time.Minute)
	return f
}

// check fails the test when seqs holds a completed message of queue.
func (f settledFixture) check(t *testing.T, read, queue string, seqs []int64) {
	t.Helper()
	for _, s := range seqs {
		if slices.Contains(f.completed[queue], s) {
			t.Errorf("%s on %s shows completed message %d", read, queue, s)
		}
	}
}

// count fails the test when a read counts other than the live messages of
// queue.
func (f settledFixture) count(t *testing.T, read, queue string, n int64) {
	t.Helper()
	if n != f.live[queue] {
		t.Errorf("%s on %s counts %d messages, want the %d live ones", read, queue, n, f.live[queue])
	}
}

// TestCompletedMessageShowsNowhere runs every read of the store over queues
// that hold completed messages, and fails if one shows, is counted, or is
// changed by an operator's call that names it. A completed message is a
// row the engine keeps as the receipt of its completion (state completed,
// settled_at set); every read leaves it out through one condition named in
// internal/engine (state.go), or through the state indexes, which hold no
// completed message. With one read's condition removed (UpdateQueue's
// count in internal/engine/queue.go, notCompleted replaced by 1), the case
// "UpdateQueue ordering" fails: the queue seems to hold a message.
func TestCompletedMessageShowsNowhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSettledFixture(t)
	st := f.b.Store
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages WHERE settled_at IS NOT NULL`); n != 2 {
		t.Fatalf("%d completed messages in the file, want 2: the fixture tests nothing", n)
	}
	type read struct {
		name string
		run  func(t *testing.T, st *mqlite.Store, queue string)
	}
	states := []mqlite.State{"", mqlite.StateActive, mqlite.StateLocked, mqlite.StateScheduled,
		mqlite.StateDeferred, mqlite.StateDeadLettered}
	reads := []read{
		{"Peek", func(t *testing.T, st *mqlite.Store, queue string) {
			ms, err := st.Peek(ctx, queue, mqlite.PeekParams{Max: 100})
			if err != nil {
				t.Fatal(err)
			}
			f.check(t, "Peek", queue, testdb.Seqs(ms))
		}},
		{"PeekDeadLetters", func(t *testing.T, st *mqlite.Store, queue string) {
			ms, err := st.PeekDeadLetters(ctx, queue, mqlite.PeekParams{Max: 100})
			if err != nil {
				t.Fatal(err)
			}
			f.check(t, "PeekDeadLetters", queue, testdb.Seqs(ms))
		}},
		{"Find in every state", func(t *testing.T, st *mqlite.Store, queue string) {
			var n int64
			for _, s := range states {
				r, err := st.Find(ctx, queue, mqlite.FindParams{State: s, Max: 100})
				if err != nil {
					t.Fatal(err)
				}
				f.check(t, "Find "+string(s), queue, testdb.Seqs(r.Messages))
				if s != "" {
					n += int64(len(r.Messages))
				}
			}
			f.count(t, "Find", queue, n)
		}},
		{"Find by MessageID and subject", func(t *testing.T, st *mqlite.Store, queue string) {
			for _, p := range []mqlite.FindParams{{MessageID: "done"}, {MessageID: "g-1"}, {SubjectPrefix: "order."}} {
				p.Max = 100
				r, err := st.Find(ctx, queue, p)
				if err != nil {
					t.Fatal(err)
				}
				f.check(t, "Find", queue, testdb.Seqs(r.Messages))
			}
		}},
		{"Stats", func(t *testing.T, st *mqlite.Store, queue string) {
			s, err := st.Stats(ctx, queue)
			if err != nil {
				t.Fatal(err)
			}
			f.count(t, "Stats", queue, s.Active+s.Scheduled+s.Locked+s.Deferred+s.DeadLettered)
			if queue == "q" && s.OldestAge != time.Minute {
				t.Errorf("Stats: oldest age %v, want 1m: the completed message is older", s.OldestAge)
			}
		}},
		{"Metrics", func(t *testing.T, st *mqlite.Store, queue string) {
			ms, err := st.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if m.Queue == queue {
					f.count(t, "Metrics", queue, m.Active+m.Scheduled+m.Locked+m.Deferred+m.DeadLettered)
				}
			}
		}},
		{"Ages", func(t *testing.T, st *mqlite.Store, queue string) {
			ages, err := st.Ages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range ages {
				if a.Queue == "q" && queue == "q" && a.OldestActive != time.Minute {
					t.Errorf("Ages: oldest active %v, want 1m: the completed message is older", a.OldestActive)
				}
			}
		}},
		{"Receivers", func(t *testing.T, st *mqlite.Store, queue string) {
			rs, err := st.Receivers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Queue == queue && r.Locks > 1 {
					t.Errorf("Receivers: %d locks on %s, want the one live lease at most", r.Locks, queue)
				}
			}
		}},
		{"Receive", func(t *testing.T, st *mqlite.Store, queue string) {
			ms, err := st.Receive(ctx, queue, mqlite.ReceiveOptions{Max: 100})
			if err != nil {
				t.Fatal(err)
			}
			f.check(t, "Receive", queue, testdb.Seqs(ms))
		}},
		{"Purge, Redrive and DeliverNow of the completed seqs", func(t *testing.T, st *mqlite.Store, queue string) {
			seqs := f.completed[queue]
			for _, s := range states[1:] {
				if n, err := st.Purge(ctx, queue, mqlite.PurgeOptions{State: s, Seqs: seqs}); err != nil || n != 0 {
					t.Errorf("Purge %s of the completed seqs: %d, %v", s, n, err)
				}
			}
			if n, err := st.Redrive(ctx, queue, mqlite.RedriveOptions{Seqs: seqs}); err != nil || n != 0 {
				t.Errorf("Redrive of the completed seqs: %d, %v", n, err)
			}
			if n, err := st.DeliverNow(ctx, queue, mqlite.DeliverNowOptions{Seqs: seqs}); err != nil || n != 0 {
				t.Errorf("DeliverNow of the completed seqs: %d, %v", n, err)
			}
		}},
		{"Purge every state", func(t *testing.T, st *mqlite.Store, queue string) {
			var n int
			for _, s := range states[1:] {
				k, err := st.Purge(ctx, queue, mqlite.PurgeOptions{State: s})
				if err != nil {
					t.Fatal(err)
				}
				n += k
			}
			f.count(t, "Purge", queue, int64(n))
		}},
		{"UpdateQueue ordering", func(t *testing.T, st *mqlite.Store, queue string) {
			// An emptied queue whose only rows are completed holds no
			// message: its ordering may change.
			for _, s := range states[1:] {
				if _, err := st.Purge(ctx, queue, mqlite.PurgeOptions{State: s}); err != nil {
					t.Fatal(err)
				}
			}
			info, err := st.GetQueue(ctx, queue)
			if err != nil {
				t.Fatal(err)
			}
			opts := info.Options
			opts.Ordering = mqlite.FIFO
			if queue == "f" {
				opts.Ordering = mqlite.Standard
			}
			if err := st.UpdateQueue(ctx, queue, opts); err != nil {
				t.Errorf("UpdateQueue of a queue holding only completed messages: %v", err)
			}
		}},
	}
	// Each read runs on its own copy of the fixture (a backup, reopened),
	// since some change it; the backup is itself a read that must carry
	// completed messages as they are, invisible.
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "copy.db")
			if err := st.Backup(ctx, path); err != nil {
				t.Fatal(err)
			}
			copied := testdb.OpenPath(t, path, mqlite.Config{})
			copied.Clock.Set(f.b.Clock.Now())
			if n := testdb.Int(t, copied.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE settled_at IS NOT NULL`); n != 2 {
				t.Fatalf("the backup holds %d completed messages, want 2", n)
			}
			for _, queue := range []string{"q", "f"} {
				r.run(t, copied.Store, queue)
			}
		})
	}
}
