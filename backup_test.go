package mqlite_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// allMessages is every message of queue, live and dead, in seq order, with
// the fields a copy must keep.
func allMessages(t *testing.T, st *mqlite.Store, queue string) []mqlite.Message {
	t.Helper()
	var out []mqlite.Message
	for _, peek := range []func(context.Context, string, mqlite.PeekParams) ([]mqlite.Message, error){
		st.Peek, st.PeekDeadLetters,
	} {
		msgs, err := peek(context.Background(), queue, mqlite.PeekParams{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			m.LockedUntil = mqlite.Message{}.LockedUntil
			out = append(out, m)
		}
	}
	return out
}

// TestBackup: a hot copy taken while the store is in use opens as a store
// and holds the same messages; its leases are recovered on open.
func TestBackup(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 5})
	b.deadLetter("q", body("dead"))
	b.send("q", body("a"), body("b"), body("c"))
	locked := b.receive("q", 1)[0]

	dst := filepath.Join(t.TempDir(), "copy.db")
	if err := b.Store.Backup(ctx, dst); err != nil {
		t.Fatalf("backup: %v", err)
	}
	// The original goes on.
	if err := b.Store.Complete(ctx, locked.Lock()); err != nil {
		t.Fatal(err)
	}

	cp, err := mqlite.Open(ctx, dst, mqlite.Config{Clock: b.Clock})
	if err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	defer cp.Close()
	got := allMessages(t, cp, "q")
	if len(got) != 4 {
		t.Fatalf("copy holds %d messages, want 4", len(got))
	}
	if got[0].Seq != locked.Seq || got[0].State != mqlite.StateActive || got[0].DeliveryCount != 1 {
		t.Fatalf("the copy's lease was not recovered: %+v", got[0])
	}
	orig := allMessages(t, b.Store, "q")
	if !reflect.DeepEqual(got[1:], orig) {
		t.Fatalf("copy differs:\n got %+v\nwant %+v", got[1:], orig)
	}
	if qi, err := cp.GetQueue(ctx, "q"); err != nil || qi.Options.MaxDeliveryCount != 5 {
		t.Fatalf("copy's queue: %+v %v", qi, err)
	}
}

// TestBackupRefusesExistingDestination: a backup never overwrites.
func TestBackupRefusesExistingDestination(t *testing.T) {
	b := sweepSetup(t)
	dst := filepath.Join(t.TempDir(), "exists.db")
	if err := os.WriteFile(dst, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Backup(context.Background(), dst); !errors.Is(err, mqlite.ErrDestinationExists) {
		t.Fatalf("backup over a file: %v, want ErrDestinationExists", err)
	}
	if raw, _ := os.ReadFile(dst); string(raw) != "keep me" {
		t.Fatal("the existing file changed")
	}
	if err := b.Store.Backup(context.Background(), ""); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("empty path: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")
	if err := b.Store.Backup(context.Background(), missing); err == nil {
		t.Fatal("backup into a missing folder succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed backup left %s", missing)
	}
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Backup(context.Background(), filepath.Join(t.TempDir(), "y.db")); !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("backup of a closed store: %v", err)
	}
}

// TestBackupKilledLeavesNoPartialFile: a process killed while it writes a
// backup leaves no destination, or a whole one; never a partial file that
// opens as a store. A retried Backup to the same path succeeds.
func TestBackupKilledLeavesNoPartialFile(t *testing.T) {
	t.Parallel()
	st, path := openFresh(t)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		for i := range n {
			body := make([]byte, 64<<10)
			body[0], body[1] = byte(i), byte(i>>8)
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: body}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	dst := path + ".bak"
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=backup", helperPathEnv+"="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the helper as soon as its backup has begun: a file for it (the
	// temporary one, or dst itself) shows up in the folder.
	deadline := time.Now().Add(30 * time.Second)
	for {
		tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".mq.db.bak.mqlite-backup-*"))
		if _, err := os.Stat(dst); err == nil || len(tmps) > 0 || time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	countIn := func(p string) int64 {
		t.Helper()
		b, err := mqlite.Open(ctx, p, mqlite.Config{})
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		defer b.Close()
		stats, err := b.Stats(ctx, "q")
		if err != nil {
			t.Fatalf("stats of %s: %v", p, err)
		}
		return stats.Total()
	}
	if _, err := os.Stat(dst); err == nil {
		if got := countIn(dst); got != n { // the kill came after the link: whole
			t.Fatalf("backup left by the killed process holds %d messages, want %d", got, n)
		}
		return
	}
	st2, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Backup(ctx, dst); err != nil {
		t.Fatalf("retried backup: %v", err)
	}
	if err := st2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := countIn(dst); got != n {
		t.Fatalf("retried backup holds %d messages, want %d", got, n)
	}
}

// TestFilesArePrivate: the store's file, its WAL, shared memory and lock
// files, and a backup hold every body and key hash: each is created 0600
// whatever the umask lets through.
func TestFilesArePrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "private.db")
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "backup.db")
	if err := st.Backup(ctx, dst); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".lock", dst} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
}
