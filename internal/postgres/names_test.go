package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// waitPidBlocked waits until the session pid waits on a lock.
func waitPidBlocked(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid); n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("session %d never waited on a lock", pid)
}

// repeatableRead begins a REPEATABLE READ transaction on db and takes its
// snapshot at once (its first statement), returning it with its session's
// pid.
func repeatableRead(t *testing.T, db *sql.DB) (*sql.Tx, int) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	noErr(t, "begin", err)
	var pid int
	noErr(t, "snapshot", tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	return tx, pid
}

// TestNamesRepeatableRead: two transactions under REPEATABLE READ, each
// with its snapshot taken before either writes, create a queue and a topic
// of one name (or two of one kind): exactly one commits, the other gets
// the typed error the SQLite engine gives (errs.ErrQueueExists for a
// queue, errs.ErrTopicExists for a topic). The control does what the first
// PostgreSQL layout did, look for the name in the other table and insert,
// without mqlite_names: both commit, so the test can see the gap.
func TestNamesRepeatableRead(t *testing.T) {
	ctx := context.Background()
	queue := func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 1) }
	topic := func(db driver.DBTX) error { return pg.CreateTopic(ctx, db, "x", 1) }
	both := `SELECT (SELECT count(*) FROM mqlite_queues WHERE name = 'x') + (SELECT count(*) FROM mqlite_topics WHERE name = 'x')`
	for _, c := range []struct {
		name        string
		first, then func(db driver.DBTX) error
		want        error
	}{
		{"queue then topic", queue, topic, errs.ErrTopicExists},
		{"topic then queue", topic, queue, errs.ErrQueueExists},
		{"queue then queue", queue, queue, errs.ErrQueueExists},
		{"topic then topic", topic, topic, errs.ErrTopicExists},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, clock := openTest(t)
			twin := openTwin(t, db, clock)
			tx1, _ := repeatableRead(t, db)
			defer func() { _ = tx1.Rollback() }()
			tx2, pid2 := repeatableRead(t, twin)
			defer func() { _ = tx2.Rollback() }()
			noErr(t, "first", c.first(tx1))
			got := make(chan error, 1)
			go func() { got <- c.then(tx2) }()
			waitPidBlocked(t, db, pid2)
			noErr(t, "commit the first", tx1.Commit())
			err := <-got
			t.Logf("the second waited on the name's key, then: %v", err)
			wantErr(t, "second", err, c.want)
			if err := tx2.Commit(); err == nil {
				t.Fatal("the second transaction committed after its creation failed")
			}
			if n := count(t, db, both); n != 1 {
				t.Fatalf("the name has %d rows, want 1", n)
			}
			if n := count(t, db, `SELECT count(*) FROM mqlite_names WHERE name = 'x'`); n != 1 {
				t.Fatalf("mqlite_names holds x %d times", n)
			}
		})
	}

	t.Run("control: the first layout's check lets both commit", func(t *testing.T) {
		db, clock := openTest(t)
		twin := openTwin(t, db, clock)
		tx1, _ := repeatableRead(t, db)
		defer func() { _ = tx1.Rollback() }()
		tx2, _ := repeatableRead(t, twin)
		defer func() { _ = tx2.Rollback() }()
		var found bool
		noErr(t, "look for a topic", tx1.QueryRow(`SELECT EXISTS (SELECT 1 FROM mqlite_topics WHERE name = 'x')`).Scan(&found))
		_, err := tx1.Exec(`INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms,
			default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body, created_at, updated_at)
			VALUES ('x', 'standard', 1, 1, 0, 0, false, 0, 0, 0, false, 1, 1)`)
		noErr(t, "insert the queue", err)
		noErr(t, "commit the queue", tx1.Commit())
		noErr(t, "look for a queue", tx2.QueryRow(`SELECT EXISTS (SELECT 1 FROM mqlite_queues WHERE name = 'x')`).Scan(&found))
		if found {
			t.Fatal("control: the snapshot saw the queue committed after it")
		}
		_, err = tx2.Exec(`INSERT INTO mqlite_topics (name, created_at) VALUES ('x', 1)`)
		noErr(t, "insert the topic", err)
		noErr(t, "commit the topic", tx2.Commit())
		if n := count(t, db, both); n != 2 {
			t.Fatalf("control: the name has %d rows; the gap did not show", n)
		}
		t.Log("control: without mqlite_names a queue and a topic of one name both committed")
	})
}

// TestNamesFollowDeletes: a deleted queue or topic frees its name for
// either kind.
func TestNamesFollowDeletes(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t)
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("x"), 1))
	wantErr(t, "topic of the queue's name", pg.CreateTopic(ctx, db, "x", 1), errs.ErrTopicExists)
	noErr(t, "delete the queue", pg.DeleteQueue(ctx, db, "x"))
	noErr(t, "topic", pg.CreateTopic(ctx, db, "x", 2))
	wantErr(t, "queue of the topic's name", pg.CreateQueue(ctx, db, adminQueue("x"), 2), errs.ErrQueueExists)
	noErr(t, "subscription", pg.CreateSubscription(ctx, db, "x", adminQueue("sub"), driver.Filter{}, 3))
	wantErr(t, "topic of the subscription queue's name", pg.CreateTopic(ctx, db, "sub", 3), errs.ErrTopicExists)
	noErr(t, "delete the topic", pg.DeleteTopic(ctx, db, "x"))
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("x"), 4))
	if n := count(t, db, `SELECT count(*) FROM mqlite_names`); n != 1 {
		t.Fatalf("mqlite_names holds %d names, want x alone (sub went with its topic)", n)
	}
	var kind string
	noErr(t, "kind", db.QueryRow(`SELECT kind FROM mqlite_names WHERE name = 'x'`).Scan(&kind))
	if kind != "queue" {
		t.Fatalf("x is a %s, want a queue", kind)
	}
}
