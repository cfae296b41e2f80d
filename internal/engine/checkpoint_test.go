package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// TestWaitCheckpoint: after WaitCheckpoint every frame committed before it
// is in the database file, so the next commit starts the WAL over (the
// check's own PASSIVE checkpoint finds only that commit's frames); once the
// handle is released it returns at once.
func TestWaitCheckpoint(t *testing.T) {
	ctx := context.Background()
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "ck.db"), BusyTimeoutMS: 1000,
		Now: func() int64 { return 1 }, Closing: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if err := (SQLite{}).Prepare(ctx, db, true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (b BLOB)`); err != nil {
		t.Fatal(err)
	}
	insert := func() {
		t.Helper()
		if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (randomblob(3000))`); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		insert()
	}
	if err := WaitCheckpoint(ctx, db); err != nil {
		t.Fatal(err)
	}
	insert()
	var busy, log, done int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		t.Fatal(err)
	}
	if log > 10 {
		t.Errorf("after WaitCheckpoint and one commit the WAL holds %d frames; want only that commit's", log)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	if err := WaitCheckpoint(ctx, db); err != nil {
		t.Errorf("WaitCheckpoint on a released handle: %v", err)
	}
}
