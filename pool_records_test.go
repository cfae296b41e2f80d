package mqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// openPool opens a store on PostgreSQL with a pool of 8 connections and a
// queue q, and sends it n messages.
func openPool(t *testing.T, n int) *mqlite.Store {
	t.Helper()
	st := openPoolB(t)
	for i := range n {
		if _, err := outbox.Send(context.Background(), st, "q", outbox.Message{Body: fmt.Appendf(nil, "seed %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// openPoolB opens a store on PostgreSQL with a pool of 8 connections and
// a queue q.
func openPoolB(t testing.TB) *mqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, pgtest.URL(t), mqlite.Config{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{LockDuration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return st
}

// recordsMatch reports how the store's in-process counts (Metrics' on
// SQLite, never read from the tables) and its registry's held leases
// differ from the tables, "" when they agree, and that every transaction's
// records were applied or dropped.
func recordsMatch(t *testing.T, st *mqlite.Store) string {
	t.Helper()
	tables, err := mqlite.TableCounts(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	mem := mqlite.TallyCounts(st)
	var diff string
	if mem["q"] != tables["q"] {
		diff += fmt.Sprintf("counts (active, scheduled, locked, deferred, dead, bytes): in process %v, tables %v; ", mem["q"], tables["q"])
	}
	if _, locks := mqlite.ReceiversKept(st); int64(locks) != tables["q"][2] {
		diff += fmt.Sprintf("the registry holds %d leases, the table %d locked rows; ", locks, tables["q"][2])
	}
	if tl, settled := mqlite.PendingRecords(st); tl != 0 || settled != 0 {
		diff += fmt.Sprintf("%d transactions' counts and %d's settlements left pending", tl, settled)
	}
	return diff
}

// TestPoolRollbackBesideCommit: two application transactions on the
// store's pool, each sending a message and completing a delivery
// (consumer.CompleteTx); one rolls back while the other is open, then the
// other commits. The in-process counts and the registry's leases equal the
// tables: the rollback dropped its own records only. The control hears
// both transactions under one key, the old store-wide list, and must
// differ (the rollback drops the other's send and completion).
func TestPoolRollbackBesideCommit(t *testing.T) {
	for _, control := range []bool{false, true} {
		t.Run(map[bool]string{false: "per transaction", true: "control: one list"}[control], func(t *testing.T) {
			mqlite.SetOneKey(control)
			st := openPool(t, 2)
			mqlite.SetOneKey(false)
			ctx := context.Background()
			got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 2})
			if err != nil || len(got) != 2 {
				t.Fatalf("receive: %d, %v", len(got), err)
			}
			var txs [2]interface {
				Commit() error
				Rollback() error
			}
			for i := range txs {
				tx, err := st.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("in tx")}); err != nil {
					t.Fatal(err)
				}
				if err := consumer.CompleteTx(ctx, tx, got[i].Lock()); err != nil {
					t.Fatal(err)
				}
				txs[i] = tx
			}
			if err := txs[1].Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := txs[0].Commit(); err != nil {
				t.Fatal(err)
			}
			diff := recordsMatch(t, st)
			t.Logf("one transaction rolled back beside another that committed: %q", diff)
			if control && diff == "" {
				t.Fatal("the control (one list of records) agreed with the tables: the test cannot tell")
			}
			if !control && diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// TestPoolRecordsConcurrent: goroutines on a store on PostgreSQL run, side
// by side, Store.Tx and application transactions on Store.DB(), each
// sending two messages and completing a delivery it received
// (consumer.CompleteTx), half of them rolling back. Then the store's
// in-process counts and its registry's held leases equal the tables, and
// no transaction's records are left pending. Both forms of Store.Tx on a
// pool run: a transaction per call and parallel group commits.
func TestPoolRecordsConcurrent(t *testing.T) {
	const workers, rounds = 8, 10
	for _, alone := range []bool{true, false} {
		t.Run(map[bool]string{true: "tx alone", false: "parallel groups"}[alone], func(t *testing.T) {
			st := openPool(t, workers*rounds)
			mqlite.SetTxAlone(st, alone)
			ctx := context.Background()
			errRollback := errors.New("roll back")
			var wg sync.WaitGroup
			var mu sync.Mutex
			var committed, rolledBack int
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
						if err != nil || len(got) != 1 {
							t.Errorf("receive: %d, %v", len(got), err)
							return
						}
						rollback := (w+r)%2 == 1
						work := func(ctx context.Context, tx outbox.Execer) error {
							for i := range 2 {
								if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: fmt.Appendf(nil, "%d/%d/%d", w, r, i)}); err != nil {
									return err
								}
							}
							if err := consumer.CompleteTx(ctx, tx, got[0].Lock()); err != nil {
								return err
							}
							if rollback {
								return errRollback
							}
							return nil
						}
						if r%2 == 0 {
							err = st.Tx(ctx, func(tx *mqlite.Tx) error { return work(tx.Context(), tx.SQL()) })
						} else {
							err = mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error { return work(ctx, tx) })
						}
						if err != nil && !errors.Is(err, errRollback) {
							t.Errorf("worker %d round %d: %v", w, r, err)
							return
						}
						mu.Lock()
						if rollback {
							rolledBack++
						} else {
							committed++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("%d transactions committed, %d rolled back, side by side", committed, rolledBack)
			if diff := recordsMatch(t, st); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// TestPoolCountersConcurrent: eight goroutines receive, complete, abandon
// and reject at once on a store on PostgreSQL, each call a transaction of
// its own beside the others': the event counters name every settlement
// exactly (the statement tells what it does with each change), and a
// receive-and-delete counts as received. The control drops what the
// statements tell (SetNoOps), leaving each change to the store's own tag,
// which cannot tell one transaction's from another's: a completion named
// by another's tag counts as nothing, an abandon as a lost lock. It must
// differ in one of three tries.
func TestPoolCountersConcurrent(t *testing.T) {
	if diff := countersRun(t); diff != "" {
		t.Fatal(diff)
	}
	mqlite.SetNoOps(true)
	defer mqlite.SetNoOps(false)
	for try := range 3 {
		if diff := countersRun(t); diff != "" {
			t.Logf("control, try %d: %s", try, diff)
			return
		}
	}
	t.Fatal("the control (no Op told) counted exactly three times: the test cannot tell")
}

// countersRun runs TestPoolCountersConcurrent's work on a new store and
// returns how its counters differ from the work done, "" when they agree.
func countersRun(t *testing.T) string {
	t.Helper()
	const n = 240 // a third completed, a third rejected, a third abandoned once then completed
	st := openPool(t, n)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "d", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := outbox.Send(ctx, st, "d", outbox.Message{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
				if err != nil || len(got) == 0 {
					if err != nil {
						t.Error(err)
					}
					break
				}
				m := got[0]
				var i int
				_, _ = fmt.Sscanf(string(m.Body), "seed %d", &i)
				switch {
				case i%3 == 1:
					err = st.Reject(ctx, m.Lock(), "bad", "input")
				case i%3 == 2 && m.DeliveryCount == 1:
					err = st.Abandon(ctx, m.Lock(), 0)
				default:
					err = st.Complete(ctx, m.Lock())
				}
				if err != nil {
					t.Error(err)
				}
			}
			for {
				got, err := st.Receive(ctx, "d", mqlite.ReceiveOptions{Max: 1, Mode: mqlite.ReceiveAndDelete})
				if err != nil || len(got) == 0 {
					if err != nil {
						t.Error(err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	ms, err := st.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mqlite.QueueCounters{}
	for _, m := range ms {
		got[m.Queue] = m.Counters
	}
	want := mqlite.QueueCounters{Sent: n, Received: n + n/3, Completed: 2 * n / 3, Abandoned: n / 3, Rejected: n / 3, DeadLettered: n / 3, Redelivered: n / 3}
	var diff string
	if got["q"] != want {
		diff += fmt.Sprintf("q's counters %+v, want %+v; ", got["q"], want)
	}
	if d := got["d"]; d.Sent != 40 || d.Received != 40 {
		diff += fmt.Sprintf("d's counters %+v, want 40 sent and received", d)
	}
	return diff
}
