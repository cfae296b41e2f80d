package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the application's own pool: driver "pgx"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/schema"
)

// recorder keeps what a store's callbacks heard.
type recorder struct {
	mu      sync.Mutex
	events  []string
	commits int
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

// take returns the events heard since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// openRecorded opens the engine's only store on a new database with the
// layout, its counts' callbacks recorded, keeping history failed
// deliveries per message, and returns the URL too.
func openRecorded(t *testing.T, history int) (*sql.DB, *testClock, *recorder, string) {
	t.Helper()
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := &testClock{}
	clock.ms.Store(1_700_000_000_000)
	rec := &recorder{}
	db, release, err := pg.Open(driver.ConnConfig{
		Path: url, StoreID: 1, MaxMessageBytes: 1 << 20, AttemptHistory: history,
		Now: clock.now, Closing: func() bool { return false },
		Changed: func(_ driver.TxKey, c driver.RowChange) {
			rec.add(fmt.Sprintf("%s %s>%s %d", c.Queue, c.Old, c.New, c.Bytes))
		},
		Created: func(_ driver.TxKey, q string) { rec.add("created " + q) },
		Dropped: func(_ driver.TxKey, q string) { rec.add("dropped " + q) },
		Commit:  func(driver.TxKey) { rec.mu.Lock(); rec.commits++; rec.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.ApplyPostgres(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, clock, rec, url
}

// sendClaimSettle sends one message of body "abc" to q on db, claims it
// and settles it with op, each in its own transaction on db.
func sendClaimSettle(t *testing.T, db *sql.DB, q driver.Queue, now int64, op driver.Op) {
	t.Helper()
	ctx := context.Background()
	var rows []driver.Row
	for _, step := range []func(tx *sql.Tx) error{
		func(tx *sql.Tx) error {
			_, err := pg.Enqueue(ctx, tx, q.Name, []driver.SendMessage{{Body: []byte("abc")}})
			return err
		},
		func(tx *sql.Tx) (err error) {
			rows, err = pg.Claim(ctx, tx, driver.ClaimRequest{Queue: q, Max: 1, Now: now})
			if err == nil && len(rows) != 1 {
				err = fmt.Errorf("claimed %d", len(rows))
			}
			return err
		},
		func(tx *sql.Tx) error {
			return pg.Settle(ctx, tx, driver.Settlement{Op: op, Queue: q.Name, Seq: rows[0].Seq,
				Token: rows[0].LockToken, Now: now, Reason: "bad", Description: "input", Worker: "w1"})
		},
	} {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := step(tx); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChangesReportedOnTheStoresHandleOnly: a send, a claim and a
// completion on the store's handle report the rows' changes as the SQLite
// engine's pre-update hook does (a completion is the row leaving); the same
// on the application's own pool, while the store is the only one open,
// reports nothing.
func TestChangesReportedOnTheStoresHandleOnly(t *testing.T) {
	db, clock, rec, url := openRecorded(t, 0)
	q := adminQueue("q")
	noErr(t, "create", pg.CreateQueue(context.Background(), db, q, clock.now()))
	sendClaimSettle(t, db, q, clock.now(), driver.OpComplete)
	want := []string{"created q", "q >active 3", "q active>locked 3", "q locked> 3"}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("on the store's handle: %q, want %q", got, want)
	}
	sendClaimSettle(t, db, q, clock.now(), driver.OpReject)
	want = []string{"q >active 3", "q active>locked 3", "q locked>dead_lettered 3"}
	if got := rec.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a reject on the store's handle: %q, want %q", got, want)
	}

	app, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sendClaimSettle(t, app, q, clock.now(), driver.OpComplete)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("on the application's own pool: %q, want nothing", got)
	}
	// The control: the application's transactions did run at the store's
	// now (the one store open), so only the reports tell them apart.
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("completed rows = %d, %v; want 2", n, err)
	}
	// A statement on the handle itself commits on its own: its changes
	// and a commit.
	rec.mu.Lock()
	before := rec.commits
	rec.mu.Unlock()
	if n, err := pg.PurgeBatch(context.Background(), db, "q", "dead_lettered"); err != nil || n != 1 {
		t.Fatalf("PurgeBatch = %d, %v; want 1", n, err)
	}
	if got, want := rec.take(), []string{"q dead_lettered> 3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a purge on the handle: %q, want %q", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.commits != before+1 {
		t.Fatalf("commits %d after a purge, want %d", rec.commits, before+1)
	}
}

// TestAttemptHistoryBound: each Abandon, Reject and lapsed lease appends
// its attempt, the oldest dropped past the store's bound; a bound of 0
// keeps none.
func TestAttemptHistoryBound(t *testing.T) {
	for _, history := range []int{2, 0} {
		t.Run(fmt.Sprint("history ", history), func(t *testing.T) {
			db, clock, _, _ := openRecorded(t, history)
			ctx := context.Background()
			q := adminQueue("q")
			noErr(t, "create", pg.CreateQueue(ctx, db, q, clock.now()))
			var seq int64
			noErr(t, "send", inTx(t, db, func(tx *sql.Tx) error {
				res, err := pg.Enqueue(ctx, tx, "q", []driver.SendMessage{{Body: []byte("x")}})
				if err == nil {
					seq = res[0].Seq
				}
				return err
			}))
			claim := func() driver.Row {
				t.Helper()
				var rows []driver.Row
				noErr(t, "claim", inTx(t, db, func(tx *sql.Tx) (err error) {
					rows, err = pg.Claim(ctx, tx, driver.ClaimRequest{Queue: q, Max: 1, Now: clock.now()})
					return err
				}))
				if len(rows) != 1 {
					t.Fatalf("claimed %d", len(rows))
				}
				return rows[0]
			}
			settle := func(r driver.Row, s driver.Settlement) {
				t.Helper()
				s.Queue, s.Seq, s.Token, s.Now, s.Worker = "q", r.Seq, r.LockToken, clock.now(), "w"
				noErr(t, string(s.Op), inTx(t, db, func(tx *sql.Tx) error { return pg.Settle(ctx, tx, s) }))
			}
			settle(claim(), driver.Settlement{Op: driver.OpAbandon, LastError: "first"})
			clock.ms.Add(1)
			settle(claim(), driver.Settlement{Op: driver.OpAbandon, LastError: "second"})
			clock.ms.Add(1)
			claim()
			clock.ms.Add(q.LockDurationMS)
			if _, err := pg.Reap(ctx, db, clock.now(), nil); err != nil {
				t.Fatal(err)
			}
			clock.ms.Add(1)
			settle(claim(), driver.Settlement{Op: driver.OpReject, Reason: "bad", Description: "input"})
			rows, err := pg.PeekDeadLetters(ctx, db, driver.PeekRequest{Queue: "q", Max: 10})
			if err != nil || len(rows) != 1 || rows[0].Seq != seq {
				t.Fatalf("dead letters %+v, %v", rows, err)
			}
			var want []driver.Attempt
			if history > 0 {
				at := clock.now()
				want = []driver.Attempt{
					{At: at - 1, Error: driver.AttemptLeaseExpired},
					{At: at, Error: "bad: input", Worker: "w"},
				}
			}
			if got := rows[0].Attempts; !reflect.DeepEqual(got, want) {
				t.Fatalf("attempts %+v, want %+v", got, want)
			}
		})
	}
}
