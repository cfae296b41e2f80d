package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	mqdriver "github.com/mqlite/mqlite/internal/driver"
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
	if err := CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: token}); !errors.Is(err, errs.ErrAlreadySettled) {
		t.Fatalf("the same completion again: %v, want ErrAlreadySettled (no replay inside a transaction)", err)
	}
	if err := CompleteTx(ctx, db, Settlement{Queue: "q", Seq: 1, Token: "ffffffffffffffffffffffffffffffff"}); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("completion with another token: %v, want ErrLockLost", err)
	}
}

// TestSettlingOncePerCompletion pins what CompleteTx rests on: the store's
// function mqlite_settling runs exactly once per in-transaction settlement
// statement, so once per completed row, never once per row the plan
// visits. Its call sits in an uncorrelated subquery, which SQLite runs
// under a Once opcode: the bytecode of completeTxSQL calls the function in
// one place only, inside the block Once guards, whatever rows the plan then
// walks. Counted: in one transaction, completions of several seqs of a
// queue with many locked rows (rows sharing the tokens in another queue
// too), completions that complete nothing (a stale token, a seq already
// completed: once each, a report the caller's rollback drops), and a
// reject (its own SELECT mqlite_settling); then again after ANALYZE.
func TestSettlingOncePerCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls []int64 // the seqs reported, in order
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "c.db"), BusyTimeoutMS: 1000,
		Now: func() int64 { return 1 }, Closing: func() bool { return false },
		Settling: func(_ mqdriver.TxKey, _ Op, _ string, seq int64, _ string) { calls = append(calls, seq) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}

	// The bytecode: one call of mqlite_settling, inside a Once block.
	rows, err := db.QueryContext(ctx, "EXPLAIN "+completeTxSQL, 1, "q", "t")
	if err != nil {
		t.Fatal(err)
	}
	var settling, onceEnd []int64 // addresses: the calls, the ends of Once blocks seen before
	var inOnce []bool
	for rows.Next() {
		var addr, p1, p2, p3, p5 int64
		var op string
		var p4, comment sql.NullString
		if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
			t.Fatal(err)
		}
		switch {
		case op == "Once":
			onceEnd = append(onceEnd, p2)
		case op == "Function" && strings.HasPrefix(p4.String, "mqlite_settling("):
			settling = append(settling, addr)
			guarded := false
			for _, end := range onceEnd {
				guarded = guarded || addr < end
			}
			inOnce = append(inOnce, guarded)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(settling) != 1 || !inOnce[0] {
		t.Fatalf("mqlite_settling called at %v (inside a Once block: %v), want one call inside a Once block", settling, inOnce)
	}

	for _, q := range []string{"q", "r"} {
		if err := CreateQueue(ctx, db, Queue{Name: q, MaxDeliveryCount: 10, LockDurationMS: 30000}, 1); err != nil {
			t.Fatal(err)
		}
	}
	const n = 64
	token := func(i int) string { return fmt.Sprintf("%032x", i) }
	for i := 1; i <= n; i++ {
		for _, row := range []struct {
			id    int
			queue string
		}{{i, "q"}, {n + i, "r"}} {
			if _, err := db.ExecContext(ctx, `INSERT INTO mqlite_messages (id, queue, state, locked_until, lock_token, enqueued_at, content_key, body_len, body)
				VALUES (?, ?, 'locked', 100, ?, 1, x'00', 1, x'62')`, row.id, row.queue, token(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// settle is the in-transaction settlement consumer.CompleteTx and
	// RejectTx run.
	settle := func(tx DBTX, op Op, seq, tok int) error {
		return SQLite{}.SettleTx(ctx, tx, Settlement{Op: op, Queue: "q", Seq: int64(seq), Token: token(tok), Reason: "r"})
	}
	// round settles seqs from in one transaction and wants one call per
	// statement: the completions, two that complete nothing, a reject.
	round := func(what string, from, wantCompleted int) {
		t.Helper()
		calls = calls[:0]
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		var want []int64
		for i := from; i < from+8; i++ {
			if err := settle(tx, OpComplete, i, i); err != nil {
				t.Fatalf("%s: complete %d: %v", what, i, err)
			}
			want = append(want, int64(i))
		}
		if err := settle(tx, OpComplete, from, from); !errors.Is(err, errs.ErrAlreadySettled) {
			t.Fatalf("%s: the same completion again: %v, want ErrAlreadySettled", what, err)
		}
		if err := settle(tx, OpComplete, from+8, from+9); !errors.Is(err, errs.ErrLockLost) {
			t.Fatalf("%s: a completion with another row's token: %v, want ErrLockLost", what, err)
		}
		if err := settle(tx, OpReject, from+8, from+8); err != nil {
			t.Fatalf("%s: reject: %v", what, err)
		}
		want = append(want, int64(from), int64(from+8), int64(from+8))
		if !slices.Equal(calls, want) {
			t.Fatalf("%s: mqlite_settling reported seqs %v, want %v: once per statement", what, calls, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var completed int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed != wantCompleted {
			t.Fatalf("%s: %d completed rows, want %d", what, completed, wantCompleted)
		}
	}
	round("fresh file", 1, 8)
	if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	round("after ANALYZE", 11, 16)
}
