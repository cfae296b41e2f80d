package mqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mqlite/mqlite"
)

// allMessages is every message of queue, live and dead, in seq order, with
// the fields a copy must keep.
func allMessages(t *testing.T, st *mqlite.Store, queue string) []mqlite.Message {
	t.Helper()
	var out []mqlite.Message
	for _, peek := range []func(context.Context, string, mqlite.PeekOptions) ([]mqlite.Message, error){
		st.Peek, st.PeekDeadLetters,
	} {
		msgs, err := peek(context.Background(), queue, mqlite.PeekOptions{Max: 1000})
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

	cp, err := mqlite.Open(ctx, dst, mqlite.Options{Clock: b.Clock})
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
