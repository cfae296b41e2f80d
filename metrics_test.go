package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// metricsOf returns the Metrics entry of queue.
func metricsOf(t *testing.T, st *mqlite.Store, queue string) (mqlite.QueueMetrics, bool) {
	t.Helper()
	all, err := st.Metrics(context.Background())
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	for _, m := range all {
		if m.Queue == queue {
			return m, true
		}
	}
	return mqlite.QueueMetrics{}, false
}

// TestMetricsCountAKnownWorkload: after testdb.MetricsWorkload (plus a
// send rolled back) the counters and the states are exactly the workload's,
// in Metrics and in Stats; the durations counted one claim per Receive
// and one settlement per settle call.
func TestMetricsCountAKnownWorkload(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", testdb.WorkloadQueue)
	ctx := context.Background()
	err := tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("gone")}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil {
		t.Fatal("the rolled-back Tx returned nil")
	}
	send := func(body string) { sendCommitted(t, tb.Store, "q", outbox.Message{Body: []byte(body)}) }
	want := testdb.MetricsWorkload(t, tb.Store, "q", send, tb.Clock)

	m, ok := metricsOf(t, tb.Store, "q")
	if !ok {
		t.Fatal("no metrics for q")
	}
	if m.Counters != want.Counters {
		t.Errorf("counters %+v, want %+v", m.Counters, want.Counters)
	}
	if m.Active != want.Active || m.DeadLettered != want.DeadLettered || m.Locked+m.Scheduled+m.Deferred != 0 {
		t.Errorf("states %+v, want active %d, dead %d", m, want.Active, want.DeadLettered)
	}
	// 6 receives; settle calls: 3 completes (one replay), 1 late, 2 abandons, 1 reject.
	if m.Claim.Count != 6 || m.Settle.Count != 7 {
		t.Errorf("claim count %d, settle count %d, want 6 and 7", m.Claim.Count, m.Settle.Count)
	}
	if n := len(m.Claim.Buckets); n != len(mqlite.DurationBuckets()) || m.Claim.Buckets[n-1] > m.Claim.Count {
		t.Errorf("claim buckets %v of count %d", m.Claim.Buckets, m.Claim.Count)
	}
	st, err := tb.Store.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Counters != want.Counters {
		t.Errorf("Stats counters %+v, want %+v", st.Counters, want.Counters)
	}
}

// TestMetricsFollowQueues: a queue appears in Metrics when created, at
// zero, and leaves when deleted; counts survive a reopen as states (seeded
// from the file) while the counters start again.
func TestMetricsFollowQueues(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	ctx := context.Background()
	tb.Queue(t, "a", mqlite.QueueOptions{})
	if m, ok := metricsOf(t, tb.Store, "a"); !ok || m.Counters != (mqlite.QueueCounters{}) || m.Active != 0 {
		t.Fatalf("new queue: %+v, %v", m, ok)
	}
	sendCommitted(t, tb.Store, "a", outbox.Message{Body: []byte("x")})
	if err := tb.Store.DeleteQueue(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := metricsOf(t, tb.Store, "a"); ok {
		t.Fatal("a deleted queue is still in Metrics")
	}
	tb.Queue(t, "b", mqlite.QueueOptions{})
	for range 3 {
		sendCommitted(t, tb.Store, "b", outbox.Message{Body: []byte(fmt.Sprint(rand.Int()))})
	}
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := mqlite.Open(ctx, tb.Path, mqlite.Config{Clock: tb.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, ok := metricsOf(t, st, "b")
	if !ok || m.Active != 3 || m.Counters != (mqlite.QueueCounters{}) {
		t.Fatalf("after reopen: %+v, %v; want 3 active and no events", m, ok)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Metrics(ctx); !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("Metrics on a closed store: %v", err)
	}
}

// TestStatsHealsCountsASavepointHid: a send undone by ROLLBACK TO SAVEPOINT
// inside a caller's transaction that then commits is a row the hook
// reported and the file does not hold; the next Stats of the queue puts
// the state counts back to the file's, whether or not its transaction
// writes (a lease it reaps on the way).
func TestStatsHealsCountsASavepointHid(t *testing.T) {
	t.Parallel()
	for _, reap := range []bool{false, true} {
		t.Run(fmt.Sprintf("reap=%v", reap), func(t *testing.T) {
			t.Parallel()
			tb := testdb.Open(t, mqlite.Config{ReaperInterval: -1})
			ctx := context.Background()
			tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Second})
			sendCommitted(t, tb.Store, "q", outbox.Message{Body: []byte("kept")})
			if reap {
				if _, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil {
					t.Fatal(err)
				}
				tb.Clock.Advance(2 * time.Second) // Stats puts the lapsed lease back
			}
			tx, err := tb.Store.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "SAVEPOINT inner"); err != nil {
				t.Fatal(err)
			}
			if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("undone")}); err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{"ROLLBACK TO inner", "RELEASE inner"} {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			st, err := tb.Store.Stats(ctx, "q")
			if err != nil {
				t.Fatal(err)
			}
			if st.Active != 1 || st.Total() != 1 {
				t.Fatalf("Stats %+v, want the one kept message, active", st)
			}
			m, _ := metricsOf(t, tb.Store, "q")
			if m.Active != 1 || m.Locked != 0 {
				t.Fatalf("Metrics after Stats: %d active, %d locked; want 1 and 0", m.Active, m.Locked)
			}
		})
	}
}

// TestMetricsMatchStatsAfterRandomOps is a property test: after each of
// many random operations (sends committed and rolled back in the caller's
// transaction, topic fan-out, receives in both modes, every settlement,
// lapsed leases, sweeps, redrives and purges), the per-state counts of
// Metrics equal those Stats reads from the indexes, on every queue.
func TestMetricsMatchStatsAfterRandomOps(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			randomOps(t, rand.New(rand.NewPCG(seed, 15)), 300)
		})
	}
}

func randomOps(t *testing.T, r *rand.Rand, n int) {
	tb := testdb.Open(t, mqlite.Config{})
	st, ctx := tb.Store, context.Background()
	queues := []string{"a", "b", "c"}
	tb.Queue(t, "a", mqlite.QueueOptions{MaxDeliveryCount: 2, LockDuration: time.Second})
	tb.Queue(t, "b", mqlite.QueueOptions{Ordering: mqlite.FIFO, LockDuration: time.Second, DedupWindow: -1})
	if err := st.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSubscription(ctx, "t", "c", mqlite.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	var held []mqlite.Message
	var deferred []mqlite.Message
	body := 0
	sendTx := func(name string, k int, commit bool) {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]outbox.Message, k)
		for i := range msgs {
			body++
			msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(body)), GroupID: []string{"", "g1", "g2"}[r.IntN(3)],
				DeliverAt: []time.Time{{}, {}, tb.Clock.Now().Add(time.Duration(r.IntN(3)) * time.Second)}[r.IntN(3)]}
		}
		if _, err := outbox.SendBatch(ctx, tx, name, msgs); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pick := func(list *[]mqlite.Message) (mqlite.Message, bool) {
		if len(*list) == 0 {
			return mqlite.Message{}, false
		}
		i := r.IntN(len(*list))
		m := (*list)[i]
		*list = append((*list)[:i], (*list)[i+1:]...)
		return m, true
	}
	settleErr := func(err error) {
		if err != nil && !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatal(err)
		}
	}
	for range n {
		q := queues[r.IntN(len(queues))]
		switch op := r.IntN(14); op {
		case 0, 1:
			sendTx([]string{"a", "b", "t"}[r.IntN(3)], 1+r.IntN(3), op == 0)
		case 2, 3:
			mode := mqlite.PeekLock
			if op == 3 && r.IntN(3) == 0 {
				mode = mqlite.ReceiveAndDelete
			}
			msgs, err := st.Receive(ctx, q, mqlite.ReceiveOptions{Max: 1 + r.IntN(3), Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if mode == mqlite.PeekLock {
				held = append(held, msgs...)
			}
		case 4:
			if m, ok := pick(&held); ok {
				settleErr(st.Complete(ctx, m.Lock()))
			}
		case 5:
			if m, ok := pick(&held); ok {
				settleErr(st.Abandon(ctx, m.Lock(), time.Duration(r.IntN(2))*time.Second))
			}
		case 6:
			if m, ok := pick(&held); ok {
				settleErr(st.Reject(ctx, m.Lock(), "r", ""))
			}
		case 7:
			if m, ok := pick(&held); ok {
				err := st.Defer(ctx, m.Lock())
				settleErr(err)
				if err == nil {
					deferred = append(deferred, m)
				}
			}
		case 8:
			if m, ok := pick(&deferred); ok {
				got, err := st.ReceiveDeferred(ctx, m.Queue, m.Seq)
				if err != nil && !errors.Is(err, mqlite.ErrMessageNotFound) {
					t.Fatal(err)
				}
				if err == nil {
					held = append(held, got)
				}
			}
		case 9:
			tb.Clock.Advance(time.Duration(r.IntN(1500)) * time.Millisecond)
		case 10:
			if _, err := mqlite.RunSweeps(ctx, st); err != nil {
				t.Fatal(err)
			}
		case 11:
			if _, err := st.Redrive(ctx, q, mqlite.RedriveOptions{}); err != nil {
				t.Fatal(err)
			}
		case 12:
			state := []mqlite.State{mqlite.StateActive, mqlite.StateLocked, mqlite.StateDeadLettered}[r.IntN(3)]
			if _, err := st.Purge(ctx, q, mqlite.PurgeOptions{State: state}); err != nil {
				t.Fatal(err)
			}
		case 13:
			locks := make([]mqlite.Lock, 0, 2)
			for range 2 {
				if m, ok := pick(&held); ok {
					locks = append(locks, m.Lock())
				}
			}
			if len(locks) > 0 {
				if _, err := st.CompleteBatch(ctx, locks); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r.IntN(4) == 0 { // Stats catches up, and so moves rows: not after every op
			compareStats(t, st, queues)
		}
	}
	compareStats(t, st, queues)
}

// compareStats checks the Metrics bytes of every queue against the table
// and its states against Stats,
// read right after it (Stats brings the queue up to date first, through
// the same connection, so Metrics sees that too).
func compareStats(t *testing.T, st *mqlite.Store, queues []string) {
	t.Helper()
	for _, q := range queues {
		// The bytes first, against the table itself: a Stats would take
		// its own figures as the tally's.
		var bytes int64
		if err := st.DB().QueryRowContext(context.Background(),
			`SELECT coalesce(sum(body_len), 0) FROM mqlite_messages WHERE queue = ? AND state <> 'completed'`, q).Scan(&bytes); err != nil {
			t.Fatal(err)
		}
		if m, _ := metricsOf(t, st, q); m.Bytes != bytes {
			t.Fatalf("queue %s: Metrics bytes %d, the table holds %d", q, m.Bytes, bytes)
		}
		s, err := st.Stats(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := metricsOf(t, st, q)
		got := [5]int64{m.Active, m.Scheduled, m.Locked, m.Deferred, m.DeadLettered}
		want := [5]int64{s.Active, s.Scheduled, s.Locked, s.Deferred, s.DeadLettered}
		if got != want {
			t.Fatalf("queue %s: Metrics states %v, Stats %v (active, scheduled, locked, deferred, dead)", q, got, want)
		}
		if s.Counters != m.Counters {
			t.Fatalf("queue %s: Stats counters %+v, Metrics %+v", q, s.Counters, m.Counters)
		}
	}
}
