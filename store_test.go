package mqlite_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// The helper process: TestOpenLockedByOtherProcess runs this test binary
// again with MQLITE_TEST_HELPER=open, and TestHelperProcess opens
// MQLITE_TEST_PATH in that second process and prints the outcome.
const (
	helperEnv     = "MQLITE_TEST_HELPER"
	helperPathEnv = "MQLITE_TEST_PATH"
)

// TestHelperProcess is not a test on its own: it does nothing unless run as
// the helper process of TestOpenLockedByOtherProcess.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "backup": // TestBackupKilledLeavesNoPartialFile
		st, err := mqlite.Open(context.Background(), os.Getenv(helperPathEnv), mqlite.Config{})
		if err == nil {
			err = st.Backup(context.Background(), os.Getenv(helperPathEnv)+".bak")
		}
		fmt.Printf("result=backup %v\n", err)
		return
	case "open":
	default:
		return
	}
	st, err := mqlite.Open(context.Background(), os.Getenv(helperPathEnv), mqlite.Config{})
	switch {
	case err == nil:
		if err := st.Close(); err != nil {
			fmt.Printf("result=error %v\n", err)
			return
		}
		fmt.Println("result=opened")
	case errors.Is(err, mqlite.ErrDBLocked):
		fmt.Println("result=locked")
	default:
		fmt.Printf("result=error %v\n", err)
	}
}

// openInOtherProcess opens path in a child process and returns what it saw:
// "opened", "locked" or "error ...".
func openInOtherProcess(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=open", helperPathEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "result="); ok {
			return r
		}
	}
	t.Fatalf("helper process printed no result:\n%s", out)
	return ""
}

// openFresh opens a store on a new file; unlike testdb.Open it leaves
// closing to the test, which is what these tests are about.
func openFresh(t *testing.T) (*mqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mq.db")
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st, path
}

func TestOpenLockedByOtherProcess(t *testing.T) {
	t.Parallel()
	st, path := openFresh(t)
	if got := openInOtherProcess(t, path); got != "locked" {
		t.Fatalf("second process while the store is open: got %q, want locked", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openInOtherProcess(t, path); got != "opened" {
		t.Fatalf("second process after Close: got %q, want opened", got)
	}
}

func TestOpenLockedInProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		spelling func(t *testing.T, path string) string
	}{
		{"same path", func(t *testing.T, path string) string { return path }},
		{"relative", func(t *testing.T, path string) string {
			wd, err := os.Getwd()
			if err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(wd, path)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.IsAbs(rel) {
				t.Fatalf("no relative spelling of %s from %s", path, wd)
			}
			return rel
		}},
		{"dot dot", func(t *testing.T, path string) string {
			sub := filepath.Join(filepath.Dir(path), "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(sub, "..", filepath.Base(path))
		}},
		{"symlink to file", func(t *testing.T, path string) string {
			link := filepath.Join(t.TempDir(), "link.db")
			if err := os.Symlink(path, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"symlink to folder", func(t *testing.T, path string) string {
			link := filepath.Join(t.TempDir(), "dirlink")
			if err := os.Symlink(filepath.Dir(path), link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, filepath.Base(path))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Config{})
			other := tc.spelling(t, b.Path)
			st, err := mqlite.Open(context.Background(), other, mqlite.Config{})
			if err == nil {
				_ = st.Close()
				t.Fatalf("second Open(%q) succeeded, want ErrDBLocked", other)
			}
			if !errors.Is(err, mqlite.ErrDBLocked) {
				t.Fatalf("second Open(%q): %v, want ErrDBLocked", other, err)
			}
			// The refused Open must not disturb the first store.
			b.Queue(t, "still-works", mqlite.QueueOptions{})
		})
	}
}

func TestCloseReleasesLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path := openFresh(t)
	if err := st.CreateQueue(ctx, "kept", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	st2, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer st2.Close()
	if _, err := st2.GetQueue(ctx, "kept"); err != nil {
		t.Fatalf("queue created before reopening: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openFresh(t)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"CreateQueue": func() error { return st.CreateQueue(ctx, "q", mqlite.QueueOptions{}) },
		"UpdateQueue": func() error { return st.UpdateQueue(ctx, "q", mqlite.QueueOptions{}) },
		"DeleteQueue": func() error { return st.DeleteQueue(ctx, "q") },
		"GetQueue":    func() error { _, err := st.GetQueue(ctx, "q"); return err },
		"ListQueues":  func() error { _, err := st.ListQueues(ctx); return err },
		"Tx":          func() error { return st.Tx(ctx, func(*mqlite.Tx) error { return nil }) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, mqlite.ErrClosed) {
			t.Errorf("%s on a closed store: %v, want ErrClosed", name, err)
		}
	}
}

func fileHash(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestOpenRefusesOtherSchemaToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path := openFresh(t)
	if _, err := st.DB().ExecContext(ctx, `UPDATE mqlite_guard SET token = 'other'`); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileHash(t, path)

	for attempt := range 2 {
		st, err := mqlite.Open(ctx, path, mqlite.Config{})
		if err == nil {
			_ = st.Close()
			t.Fatal("Open of a file with another guard token succeeded")
		}
		// The second attempt also proves the refused Open released the lock.
		if !errors.Is(err, mqlite.ErrSchemaVersionMismatch) {
			t.Fatalf("attempt %d: %v, want ErrSchemaVersionMismatch", attempt, err)
		}
	}
	if after := fileHash(t, path); !bytes.Equal(before[:], after[:]) {
		t.Fatal("the refused file was modified")
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		t.Fatalf("the refused Open wrote %d bytes to the WAL", fi.Size())
	}
}

func TestOpenInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		emptyPath bool
		opts      mqlite.Config
	}{
		{"empty path", true, mqlite.Config{}},
		{"unknown sync mode", false, mqlite.Config{Sync: 7}},
		{"negative busy timeout", false, mqlite.Config{BusyTimeout: -time.Second}},
		{"negative max message bytes", false, mqlite.Config{MaxMessageBytes: -1}},
		{"max message bytes over 256 MiB", false, mqlite.Config{MaxMessageBytes: 256<<20 + 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "mq.db")
			arg := path
			if tc.emptyPath {
				arg = ""
			}
			st, err := mqlite.Open(context.Background(), arg, tc.opts)
			if err == nil {
				_ = st.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("Open: %v, want ErrInvalidArgument", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("Open with bad options left a file behind: %v", err)
			}
		})
	}
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{BusyTimeout: 250 * time.Millisecond})
	db := b.Store.DB()
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	if got := testdb.Int(t, db, `PRAGMA busy_timeout`); got != 250 {
		t.Errorf("busy_timeout = %d, want 250", got)
	}
	if got := testdb.Int(t, db, `PRAGMA page_size`); got != engine.PageSize {
		t.Errorf("page_size = %d, want %d", got, engine.PageSize)
	}
	if got := db.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("MaxOpenConnections = %d, want 1", got)
	}
	if b.Store.Path() != b.Path {
		t.Errorf("Path() = %q, want %q", b.Store.Path(), b.Path)
	}
}

// TestSyncMode reads PRAGMA synchronous (1 = NORMAL, 2 = FULL) for each way
// of choosing the mode. It sets MQLITE_SYNC, so it cannot run in parallel.
func TestSyncMode(t *testing.T) {
	tests := []struct {
		name string
		env  string
		sync mqlite.SyncMode
		want int64
	}{
		{"default", "", mqlite.SyncNormal, 1},
		{"Config.Sync full", "", mqlite.SyncFull, 2},
		{"MQLITE_SYNC=full", "full", mqlite.SyncNormal, 2},
		{"MQLITE_SYNC=FULL", "FULL", mqlite.SyncNormal, 2},
		{"MQLITE_SYNC=normal", "normal", mqlite.SyncNormal, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("MQLITE_SYNC", tc.env)
			b := testdb.Open(t, mqlite.Config{Sync: tc.sync})
			if got := testdb.Int(t, b.Store.DB(), `PRAGMA synchronous`); got != tc.want {
				t.Fatalf("PRAGMA synchronous = %d, want %d", got, tc.want)
			}
		})
	}
}
