package engine

import (
	"context"
	"testing"
)

// TestOldestAndPurgeSeqsReadOnlyTheirRows: Oldest (what Store.Ages reads
// per queue) answers with a few index seeks on the small queue and on the
// big one alike, and a purge of listed seqs deletes the listed messages of
// its queue and state only, reading their rows and not the queue's; the
// control, the same purge made to walk the table, shows the counter sees
// the big queue.
func TestOldestAndPurgeSeqsReadOnlyTheirRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := bigBeside(t)
	for _, tc := range []struct {
		queue            string
		wantEnq, wantDLQ int64
	}{
		// q's claimable front is message 1 (2 is locked, 3 scheduled, 2006
		// held); its dead letter was dead-lettered at 7.
		{"q", 1, 7},
		{"big", 1, 0},
		{"empty", 0, 0},
	} {
		t.Run("oldest "+tc.queue, func(t *testing.T) {
			var enq, dlq int64
			var err error
			n := pagesRead(t, conn, func() { enq, dlq, err = Oldest(ctx, conn, tc.queue) })
			if err != nil || enq != tc.wantEnq || dlq != tc.wantDLQ {
				t.Fatalf("oldest: %d %d %v, want %d %d", enq, dlq, err, tc.wantEnq, tc.wantDLQ)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
	// The control deletes nothing (no message 0), but walks every row.
	if n := pagesRead(t, conn, func() {
		if _, err := conn.ExecContext(ctx, `DELETE FROM mqlite_messages NOT INDEXED
			WHERE id + 0 IN (SELECT value FROM json_each(?3)) AND queue = ?1 AND state = ?2`, "q", "dead_lettered", "[0]"); err != nil {
			t.Fatal(err)
		}
	}); n < 5*pageBound {
		t.Fatalf("control: a walking purge read %d pages, want the big queue's (at least %d)", n, 5*pageBound)
	}
	for _, tc := range []struct {
		name  string
		state string
		seqs  []int64
		want  int64
	}{
		// 2004 is deferred, 1000 is big's, 99999 is no message: skipped.
		{"dead letters", "dead_lettered", []int64{2005, 2004, 1000, 99999}, 1},
		{"again", "dead_lettered", []int64{2005}, 0},
		{"active of another queue", "active", []int64{1000}, 0},
		{"held", "active", []int64{2006, 2}, 1},
	} {
		t.Run("purge "+tc.name, func(t *testing.T) {
			var got int64
			var err error
			n := pagesRead(t, conn, func() { got, err = PurgeSeqs(ctx, conn, "q", tc.state, tc.seqs) })
			if err != nil || got != tc.want {
				t.Fatalf("purged %d %v, want %d", got, err, tc.want)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
	var left int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q'`).Scan(&left); err != nil || left != 4 {
		t.Fatalf("q holds %d messages (%v), want 4 after two purged", left, err)
	}
}
