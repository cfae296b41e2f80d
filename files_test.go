package mqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestDiskFullAndReadOnlyHaveSentinels: a write the file cannot take is
// ErrDiskFull (here SQLite's page limit, which fails exactly as a full disk
// does) or ErrReadOnly, and leaves the store usable once the cause is gone.
func TestDiskFullAndReadOnlyHaveSentinels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		cause, cure string
		body        int
		want        error
	}{
		{"disk full", "", "PRAGMA max_page_count = 1073741823", 512 << 10, mqlite.ErrDiskFull},
		{"read-only", "PRAGMA query_only = 1", "PRAGMA query_only = 0", 10, mqlite.ErrReadOnly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Options{})
			b.Queue(t, "q", mqlite.QueueOptions{})
			db := b.Store.DB()
			cause := tc.cause
			if cause == "" { // a few pages above what the file holds
				cause = "PRAGMA max_page_count = " + strconv.FormatInt(testdb.Int(t, db, `PRAGMA page_count`)+2, 10)
			}
			if _, err := db.Exec(cause); err != nil {
				t.Fatal(err)
			}
			send := func() error {
				return b.Store.Tx(context.Background(), func(tx *mqlite.Tx) error {
					_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: make([]byte, tc.body)})
					return err
				})
			}
			if err := send(); !errors.Is(err, tc.want) {
				t.Fatalf("send: %v, want %v", err, tc.want)
			}
			if _, err := db.Exec(tc.cure); err != nil {
				t.Fatal(err)
			}
			if err := send(); err != nil {
				t.Fatalf("send once the cause is gone: %v", err)
			}
		})
	}
}

// TestOpenLeavesAForeignFileUntouched: a plain SQLite file with a table of a
// name mqlite uses is refused before anything is written: same bytes, no
// WAL, no migration table.
func TestOpenLeavesAForeignFileUntouched(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE messages (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO messages (text) VALUES ('mine')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := mqlite.Open(context.Background(), path, mqlite.Options{}); !errors.Is(err, mqlite.ErrSchemaVersionMismatch) {
		if err == nil {
			_ = st.Close()
		}
		t.Fatalf("open: %v, want ErrSchemaVersionMismatch", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the refused file changed")
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused file has a WAL: %v", err)
	}
}
