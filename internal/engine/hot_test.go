package engine_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestHotPathTaken sends in the application's own transaction on the
// store's handle and finds the send's statement prepared on the hot path;
// the control, with the lever off, finds it not prepared, so the check can
// fail. A transaction already committed still gets database/sql's
// sql.ErrTxDone, and its send writes nothing.
func TestHotPathTaken(t *testing.T) {
	defer engine.HotLevers(true, true)
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		engine.HotLevers(on, true)
		tb := testdb.Open(t, mqlite.Config{})
		tb.Queue(t, "q", mqlite.QueueOptions{})
		db := tb.Store.DB()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got, err := engine.HotPrepared(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("lever on %v: the send's hot statement prepared %v", on, got)
		if got != on {
			t.Fatalf("lever on %v: hot statement prepared %v", on, got)
		}
		if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("y")}); !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("send on a committed transaction: %v, want sql.ErrTxDone", err)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM mqlite_messages`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d messages, %v; want 1", n, err)
		}
	}
}

// TestHotPathConcurrentTx uses one transaction of the application from
// two goroutines at once, database/sql's statements in one and sends on
// the hot path in the other: the connection's lock serializes them (the
// race detector watches the driver's memory), and every row is there.
func TestHotPathConcurrentTx(t *testing.T) {
	ctx := context.Background()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	db := tb.Store.DB()
	if _, err := db.Exec(`CREATE TABLE app (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const each = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range each {
			if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("m")}); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range each {
			if _, err := tx.ExecContext(ctx, `INSERT INTO app (v) VALUES ('a')`); err != nil {
				errs <- err
				return
			}
			rows, err := tx.QueryContext(ctx, `SELECT count(*) FROM app`)
			if err != nil {
				errs <- err
				return
			}
			for rows.Next() {
			}
			_ = rows.Close()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var msgs, rows int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM mqlite_messages), (SELECT count(*) FROM app)`).Scan(&msgs, &rows); err != nil {
		t.Fatal(err)
	}
	if msgs != each || rows != each {
		t.Fatalf("%d messages and %d rows, want %d of each", msgs, rows, each)
	}
}
