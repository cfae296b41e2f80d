package mqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
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
			b := testdb.Open(t, mqlite.Config{})
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
// name mqlite reserves (mqlite_…) is refused before anything is written:
// same bytes, no WAL, no migration table.
func TestOpenLeavesAForeignFileUntouched(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE mqlite_messages (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO mqlite_messages (text) VALUES ('mine')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := mqlite.Open(context.Background(), path, mqlite.Config{}); !errors.Is(err, mqlite.ErrSchemaVersionMismatch) {
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

// TestTxInFlightAtCloseCannotCommit: a transaction open when Close begins
// cannot write a message or commit; the file stays locked until it ends, so
// a second store cannot open the file meanwhile; nothing it did survives.
func TestTxInFlightAtCloseCannotCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path := openFresh(t)
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	started, proceed := make(chan struct{}), make(chan struct{})
	var sendErrs []error
	txErr := make(chan error, 1)
	go func() {
		txErr <- st.Tx(ctx, func(tx *mqlite.Tx) error {
			close(started)
			<-proceed
			for _, b := range [][]byte{[]byte("eleven byte"), nil} {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: b})
				sendErrs = append(sendErrs, err)
			}
			return nil
		})
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	for { // Close has begun once the store refuses calls
		if _, err := st.Stats(ctx, "q"); errors.Is(err, mqlite.ErrClosed) {
			break
		}
		runtime.Gosched()
	}
	if other, err := mqlite.Open(ctx, path, mqlite.Config{}); !errors.Is(err, mqlite.ErrDBLocked) {
		if err == nil {
			_ = other.Close()
		}
		t.Fatalf("open while a transaction of the closing store is open: %v, want ErrDBLocked", err)
	}
	close(proceed)
	if err := <-txErr; !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("the transaction: %v, want ErrClosed", err)
	}
	for i, err := range sendErrs {
		if !errors.Is(err, mqlite.ErrClosed) {
			t.Errorf("send %d after Close began: %v, want ErrClosed", i, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	again, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if stats, err := again.Stats(ctx, "q"); err != nil || stats.Total() != 0 {
		t.Fatalf("after reopening: %+v %v, want no message", stats, err)
	}
}

// TestSecondWriterRefusedWithoutTheSidecar: deleting or renaming the
// "<file>.lock" sidecar does not let a second store in: the file's own
// lock still refuses it.
func TestSecondWriterRefusedWithoutTheSidecar(t *testing.T) {
	t.Parallel()
	for name, tamper := range map[string]func(lock string) error{
		"deleted": os.Remove,
		"renamed": func(lock string) error { return os.Rename(lock, lock+".old") },
		"recreated": func(lock string) error {
			if err := os.Remove(lock); err != nil {
				return err
			}
			return os.WriteFile(lock, nil, 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, path := openFresh(t)
			defer st.Close()
			if err := tamper(path + ".lock"); err != nil {
				t.Fatal(err)
			}
			if other, err := mqlite.Open(context.Background(), path, mqlite.Config{}); !errors.Is(err, mqlite.ErrDBLocked) {
				if err == nil {
					_ = other.Close()
				}
				t.Fatalf("second open: %v, want ErrDBLocked", err)
			}
		})
	}
}
