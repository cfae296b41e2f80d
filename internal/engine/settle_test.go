package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mqlite/mqlite/internal/errs"
	"github.com/mqlite/mqlite/schema"
)

// TestCompleteTxWritesNothingWhenClosing: the one statement of CompleteTx
// calls the store's functions before it writes, so a store that is closing
// refuses it (errs.ErrClosed) with the message still locked, as the
// separate mqlite_settling query did.
func TestCompleteTxWritesNothingWhenClosing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var closing atomic.Bool
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "c.db"), BusyTimeoutMS: 1000,
		Now: func() int64 { return 1 }, Closing: closing.Load})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := CreateQueue(ctx, db, Queue{Name: "q", MaxDeliveryCount: 10, LockDurationMS: 30000}, 1); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	if _, err := db.ExecContext(ctx, `INSERT INTO mqlite_messages (id, queue, state, locked_until, lock_token, enqueued_at, content_key, body_len, body)
		VALUES (1, 'q', 'locked', 100, ?, 1, x'00', 1, x'62')`, token); err != nil {
		t.Fatal(err)
	}
	closing.Store(true)
	err = CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: token})
	if !errors.Is(err, errs.ErrClosed) {
		t.Fatalf("complete while closing: %v, want ErrClosed", err)
	}
	closing.Store(false)
	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM mqlite_messages WHERE id = 1`).Scan(&state); err != nil || state != "locked" {
		t.Fatalf("state %q (%v), want locked", state, err)
	}
	if err := CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: token}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if err := CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: token}); err != nil {
		t.Fatalf("the same completion again (a replay from the completed row): %v", err)
	}
	if err := CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: "ffffffffffffffffffffffffffffffff"}); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("completion with another token: %v, want ErrLockLost", err)
	}
}
