package engine

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"modernc.org/sqlite"

	"github.com/mqlite/mqlite/internal/driver"
)

// oldLiveWindow is the live-state window before it was read from the
// states' indexes: one condition on the state, which no index serves. The
// control below runs it to show the page counter sees a read of every
// queue.
const oldLiveWindow = `SELECT id FROM mqlite_messages WHERE queue = ?1 AND id >= ?2
	AND state NOT IN ('dead_lettered', 'completed') ORDER BY id LIMIT ?3`

// pagesRead runs f on conn and returns how many database pages it fetched
// (the connection's page cache hits and misses): what a statement reads,
// counted by SQLite, not timed.
func pagesRead(t *testing.T, conn *sql.Conn, f func()) int {
	t.Helper()
	status := func(reset bool) int {
		n := 0
		if err := conn.Raw(func(dc any) error {
			for _, op := range []sqlite.DBStatusOp{sqlite.DBStatusCacheHit, sqlite.DBStatusCacheMiss} {
				cur, _, err := dc.(*cachingConn).Conn.(sqlite.DBStatus).Status(op, reset)
				if err != nil {
					return err
				}
				n += cur
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	status(true)
	f()
	return status(false)
}

// pageBound is what a statement that seeks a few index entries and rows
// reads (each fetch of a page counts, a second one of the same page too);
// the big queue of bigBeside alone fills about 670 pages.
const pageBound = 64

// bigBeside opens a file with queue "q" holding six messages (one in each
// state a page can show, and one held behind its group) beside a queue
// "big" of 2,000 and an empty one, and returns one connection to it to
// count pages on. q's messages sit on both sides of big's, so that no scan
// in id order can stop early: 1 active (the front of group g), 2 locked, 3
// scheduled, then big's 4 to 2003 (one group: 4 its front, the others held
// behind it), then 2004 deferred, 2005 dead-lettered (at 7), 2006 active
// and held behind 1. Each message was sent at its place in its insert (1
// for the first).
func bigBeside(t *testing.T) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	db := planDB(t).(*sql.DB)
	for _, name := range []string{"big", "empty"} {
		if err := CreateQueue(ctx, db, Queue{Name: name, MaxDeliveryCount: 10, LockDurationMS: 30000}, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Rows of about 1 KiB: a few to a page, so that the big queue fills
	// hundreds of pages without the time 20,000 inserts take under -race.
	insert := func(queue, state string, held int, group any, n int) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?5)
			INSERT INTO mqlite_messages (queue, state, held, group_id, enqueued_at, content_key, body_len, body,
				dead_lettered_at)
			SELECT ?1, ?2, ?3, ?4, i, x'00', 1000, zeroblob(1000), CASE ?2 WHEN 'dead_lettered' THEN 7 ELSE 0 END
			FROM n`, queue, state, held, group, n); err != nil {
			t.Fatal(err)
		}
	}
	insert("q", "active", 0, "g", 1)
	insert("q", "locked", 0, nil, 1)
	insert("q", "scheduled", 0, nil, 1)
	insert("big", "active", 0, nil, 2_000)
	insert("q", "deferred", 0, nil, 1)
	insert("q", "dead_lettered", 0, nil, 1)
	insert("q", "active", 1, "g", 1)
	// big's messages are one group: its front, 4, and 1,999 held behind it.
	if _, err := db.ExecContext(ctx, `UPDATE mqlite_messages SET group_id = 'G', held = id > 4 WHERE queue = 'big'`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestBrowseReadsOnlyItsQueue: peek and find on a queue of six messages
// beside a queue of 2,000 (of 1 KiB each) read a handful of pages,
// whatever the state filter; the control (the old live-state window)
// reads the big queue's pages, so the counter would see it. A page of the
// big queue, one group's backlog, reads the page's members; Find's ScanMax
// bounds the rows a page reads.
func TestBrowseReadsOnlyItsQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := bigBeside(t)
	var err error
	if n := pagesRead(t, conn, func() {
		rows, err := conn.QueryContext(ctx, oldLiveWindow, "q", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		rows.Close()
	}); n < 5*pageBound {
		t.Fatalf("control: the old window read %d pages, want the big queue's (at least %d)", n, 5*pageBound)
	}
	for _, tc := range []struct {
		state string
		want  []int64
	}{
		{"", []int64{1, 2, 3, 2004, 2006}},
		{"active", []int64{1, 2006}},
		{"locked", []int64{2}},
		{"scheduled", []int64{3}},
		{"deferred", []int64{2004}},
		{"dead_lettered", []int64{2005}},
	} {
		t.Run("find "+tc.state, func(t *testing.T) {
			var res FindResult
			n := pagesRead(t, conn, func() {
				res, err = Find(ctx, conn, FindRequest{Queue: "q", Max: 100, State: tc.state, ScanMax: 10_000})
				if err != nil {
					t.Fatal(err)
				}
			})
			if got := seqsOf(res.Rows); !slices.Equal(got, tc.want) || res.Scanned != len(tc.want) {
				t.Fatalf("got %v (scanned %d), want %v", got, res.Scanned, tc.want)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
	for _, tc := range []struct {
		name string
		peek func(context.Context, DBTX, PeekRequest) ([]Row, error)
		want []int64
	}{
		{"peek", Peek, []int64{1, 2, 3, 2004, 2006}},
		{"peek dead letters", PeekDeadLetters, []int64{2005}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []Row
			n := pagesRead(t, conn, func() {
				rows, err = tc.peek(ctx, conn, PeekRequest{Queue: "q", Max: 100})
				if err != nil {
					t.Fatal(err)
				}
			})
			if got := seqsOf(rows); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
	// A page of big, a group's backlog, reads the page's members of the
	// group, not the backlog.
	for _, tc := range []struct {
		name string
		page func() ([]Row, error)
	}{
		{"peek", func() ([]Row, error) { return Peek(ctx, conn, PeekRequest{Queue: "big", Max: 10}) }},
		{"find", func() ([]Row, error) {
			res, err := Find(ctx, conn, FindRequest{Queue: "big", Max: 10, ScanMax: 10})
			return res.Rows, err
		}},
		{"find active", func() ([]Row, error) {
			res, err := Find(ctx, conn, FindRequest{Queue: "big", Max: 10, State: "active", ScanMax: 10})
			return res.Rows, err
		}},
	} {
		t.Run(tc.name+" of a group backlog", func(t *testing.T) {
			var rows []Row
			n := pagesRead(t, conn, func() {
				if rows, err = tc.page(); err != nil {
					t.Fatal(err)
				}
			})
			if got := seqsOf(rows); len(got) != 10 || got[0] != 4 || got[9] != 13 {
				t.Fatalf("got %v, want 4 to 13", got)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
	// ScanMax bounds the rows read, not the rows matched: from seq 3 on, a
	// page of two examines q's 3 and 2004 and stops there, with nothing
	// found (no subject), whatever lies between them.
	t.Run("find within ScanMax", func(t *testing.T) {
		var res FindResult
		n := pagesRead(t, conn, func() {
			res, err = Find(ctx, conn, FindRequest{Queue: "q", FromSeq: 3, Max: 100, SubjectPrefix: "x", ScanMax: 2})
			if err != nil {
				t.Fatal(err)
			}
		})
		if len(res.Rows) != 0 || res.Scanned != 2 || res.NextSeq != 2005 {
			t.Fatalf("got %v, scanned %d, next %d; want none, 2, 2005", seqsOf(res.Rows), res.Scanned, res.NextSeq)
		}
		if n > pageBound {
			t.Fatalf("read %d pages, want at most %d", n, pageBound)
		}
	})
}

// seqsOf lists the rows' sequence numbers.
func seqsOf(rows []Row) []int64 {
	out := []int64{}
	for _, r := range rows {
		out = append(out, r.Seq)
	}
	return out
}

// TestBrowseAScheduledBacklog: a page of a queue with 5,000 scheduled
// messages, due in the reverse of their send order, reads the page's
// entries of the scheduled messages' index by id, not the backlog; the
// control (the same arm on the index in due order, as the window read it
// before) reads the queue's whole scheduled backlog. The queue's name is
// as long as a name may be, so that its index entries fill about 180
// pages without the time 50,000 inserts take under -race.
func TestBrowseAScheduledBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := planDB(t).(*sql.DB)
	q := strings.Repeat("q", 128)
	if err := CreateQueue(ctx, db, Queue{Name: q, MaxDeliveryCount: 10, LockDurationMS: 30000}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
		INSERT INTO mqlite_messages (queue, state, visible_at, enqueued_at, content_key, body_len, body)
		SELECT ?1, 'scheduled', 1000000 - i, i, x'00', 1, x'00' FROM n`, q); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	oldArm := `SELECT id FROM mqlite_messages INDEXED BY mqlite_msg_scheduled
		WHERE queue = ?1 AND id >= ?2 AND state = 'scheduled' ORDER BY id LIMIT ?3`
	if n := pagesRead(t, conn, func() {
		if _, err := driver.QueryIDs(ctx, conn, oldArm, q, 0, 10); err != nil {
			t.Fatal(err)
		}
	}); n < 2*pageBound {
		t.Fatalf("control: the arm in due order read %d pages, want the backlog's (at least %d)", n, 2*pageBound)
	}
	for _, tc := range []struct {
		name string
		page func() ([]Row, error)
	}{
		{"peek", func() ([]Row, error) { return Peek(ctx, conn, PeekRequest{Queue: q, Max: 10}) }},
		{"find", func() ([]Row, error) {
			res, err := Find(ctx, conn, FindRequest{Queue: q, Max: 10, ScanMax: 10})
			return res.Rows, err
		}},
		{"find scheduled", func() ([]Row, error) {
			res, err := Find(ctx, conn, FindRequest{Queue: q, Max: 10, State: "scheduled", ScanMax: 10})
			return res.Rows, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []Row
			n := pagesRead(t, conn, func() {
				if rows, err = tc.page(); err != nil {
					t.Fatal(err)
				}
			})
			if got := seqsOf(rows); len(got) != 10 || got[0] != 1 || got[9] != 10 {
				t.Fatalf("got %v, want 1 to 10", got)
			}
			if n > pageBound {
				t.Fatalf("read %d pages, want at most %d", n, pageBound)
			}
		})
	}
}
