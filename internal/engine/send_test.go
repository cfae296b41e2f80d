package engine

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/schema"
)

// sendDB opens a fresh file with the schema on the engine's own connection,
// whose clock reads 1000, and creates qs.
func sendDB(t *testing.T, qs ...Queue) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "send.db"), BusyTimeoutMS: 1000,
		MaxMessageBytes: 1 << 20, Now: func() int64 { return 1000 }, Closing: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		q.MaxDeliveryCount, q.LockDurationMS = 10, 30000
		if err := CreateQueue(ctx, db, q, 1); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// TestSendStatementsCopyNoRow: the single send's statements write their
// row straight into its table. An INSERT … SELECT that reads the table it
// writes (the next seq, the group hold) first copies its row into a
// temporary b-tree (an OpenEphemeral without a key); the
// ephemeral tables of a constant IN list (with a key) are the layout's.
func TestSendStatementsCopyNoRow(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	for name, q := range map[string]string{"insert": insertMessage, "dedup row": insertDedup} {
		rows, err := db.QueryContext(context.Background(), "EXPLAIN "+q, make([]any, strings.Count(q, "?")+1)...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var addr, p1, p2, p3, p5 int
			var op string
			var p4, comment sql.NullString
			if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
				t.Fatal(err)
			}
			if op == "OpenEphemeral" && !p4.Valid {
				t.Errorf("%s copies its rows into a temporary table (op %d)", name, addr)
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendPlan: the single send seeks the queue by name, the dedup row by
// key and the group's live members by the group's index; it scans nothing.
func TestSendPlan(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	got := explain(t, db, insertMessage, "q", nil, "g", nil, 0, 0, nil, []byte{1}, []byte{1}, "k", 1, 1, "standard", 0, 0, 0)
	for _, w := range []string{
		"SEARCH q USING INDEX sqlite_autoindex_mqlite_queues_1 (name=?)",
		"SEARCH d USING PRIMARY KEY (queue=? AND key=?)",
		"SEARCH b USING INDEX mqlite_msg_group_live (queue=? AND group_id=?)",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("plan lacks %q:\n%s", w, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "SCAN ") && line != "SCAN CONSTANT ROW" { // the VALUES row
			t.Errorf("plan scans: %q\n%s", line, got)
		}
	}
}

// TestSendLearnsQueueShape: a single send that assumes a wrong shape of its
// queue (another queue's of the same name, or the queue's before a change)
// inserts the row the queue's real settings make, and remembers them. Each
// case sends two messages; the queue names are this test's own, as the
// shapes are process-wide.
func TestSendLearnsQueueShape(t *testing.T) {
	t.Parallel()
	type row struct {
		group   any // nil: none
		held    int64
		expires int64
	}
	for _, tc := range []struct {
		name    string
		q       Queue
		assumed queueShape
		msgs    [2]SendMessage
		want    [2]row
		dup     bool  // the second is a duplicate of the first
		dedup   int64 // the first's dedup row expires then; 0: none
	}{
		{"fifo assumed standard", Queue{FIFO: true}, queueShape{},
			[2]SendMessage{{Body: []byte("a")}, {Body: []byte("b")}},
			[2]row{{"", 0, 0}, {"", 1, 0}}, false, 0},
		{"standard assumed fifo", Queue{}, queueShape{fifo: true},
			[2]SendMessage{{Body: []byte("a")}, {Body: []byte("b")}},
			[2]row{{nil, 0, 0}, {nil, 0, 0}}, false, 0},
		{"grouped on standard assumed fifo", Queue{}, queueShape{fifo: true},
			[2]SendMessage{{Body: []byte("a"), GroupID: "g"}, {Body: []byte("b"), GroupID: "g"}},
			[2]row{{"g", 0, 0}, {"g", 1, 0}}, false, 0},
		{"window assumed off", Queue{DedupWindowMS: 60000}, queueShape{},
			[2]SendMessage{{Body: []byte("a"), MessageID: "m"}, {Body: []byte("a"), MessageID: "m"}},
			[2]row{{nil, 0, 0}}, true, 61000},
		{"window assumed other", Queue{DedupWindowMS: 60000}, queueShape{windowMS: 5000},
			[2]SendMessage{{Body: []byte("a"), MessageID: "m"}, {Body: []byte("a"), MessageID: "m"}},
			[2]row{{nil, 0, 0}}, true, 61000},
		{"window off assumed on", Queue{}, queueShape{windowMS: 60000},
			[2]SendMessage{{Body: []byte("a"), MessageID: "m"}, {Body: []byte("a"), MessageID: "m"}},
			[2]row{{nil, 0, 0}, {nil, 0, 0}}, false, 0},
		{"bodies assumed not", Queue{DedupWindowMS: 60000, DedupByBody: true}, queueShape{windowMS: 60000},
			[2]SendMessage{{Body: []byte("a")}, {Body: []byte("a")}},
			[2]row{{nil, 0, 0}}, true, 61000},
		{"bodies assumed", Queue{DedupWindowMS: 60000}, queueShape{windowMS: 60000, byBody: true},
			[2]SendMessage{{Body: []byte("a")}, {Body: []byte("a")}},
			[2]row{{nil, 0, 0}, {nil, 0, 0}}, false, 0},
		{"default ttl assumed fifo", Queue{DefaultTTLMS: 5000}, queueShape{fifo: true},
			[2]SendMessage{{Body: []byte("a")}, {Body: []byte("b"), TTLMS: 100}},
			[2]row{{nil, 0, 6000}, {nil, 0, 1100}}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := tc.q
			q.Name = "shape " + tc.name
			db := sendDB(t, q)
			real := queueShape{fifo: q.FIFO, windowMS: q.DedupWindowMS, byBody: q.DedupByBody}
			shapes.put(q.Name, tc.assumed)
			var seqs [2]int64
			for i, m := range tc.msgs {
				res, err := Send(ctx, db, q.Name, []SendMessage{m})
				if err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if r := res[0]; r.Err != nil || r.Duplicate != (tc.dup && i == 1) {
					t.Fatalf("send %d: %+v", i, r)
				}
				seqs[i] = res[0].Seq
				if got := shapes.get(q.Name); got != real {
					t.Fatalf("after send %d the shape is %+v, want %+v", i, got, real)
				}
			}
			if tc.dup {
				if seqs[1] != seqs[0] {
					t.Fatalf("the duplicate answers seq %d, want %d", seqs[1], seqs[0])
				}
			}
			for i, w := range tc.want {
				if tc.dup && i == 1 {
					break
				}
				var got row
				if err := db.QueryRowContext(ctx, `SELECT group_id, held, expires_at FROM mqlite_messages WHERE id = ?`,
					seqs[i]).Scan(&got.group, &got.held, &got.expires); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("message %d: %v, want %v", i, got, w)
				}
			}
			var expires int64
			err := db.QueryRowContext(ctx, `SELECT expires_at FROM mqlite_dedup WHERE queue = ?`, q.Name).Scan(&expires)
			switch {
			case tc.dedup == 0 && err != sql.ErrNoRows:
				t.Errorf("a dedup row (expires %d, %v), want none", expires, err)
			case tc.dedup != 0 && (err != nil || expires != tc.dedup):
				t.Errorf("the dedup row expires %d (%v), want %d", expires, err, tc.dedup)
			}
		})
	}
}

// TestShapeCacheBound: the shapes forget every name rather than grow past
// maxShapes, and keep the newest.
func TestShapeCacheBound(t *testing.T) {
	t.Parallel()
	c := shapeCache{m: map[string]queueShape{}}
	for i := range maxShapes + 1 {
		c.put(fmt.Sprint("q", i), queueShape{windowMS: int64(i) + 1})
	}
	if len(c.m) > maxShapes {
		t.Fatalf("%d shapes, want at most %d", len(c.m), maxShapes)
	}
	if got := c.get(fmt.Sprint("q", maxShapes)); got.windowMS != maxShapes+1 {
		t.Fatalf("the newest shape is %+v", got)
	}
	c.put("q0", queueShape{fifo: true}) // a known name costs no room
	if got := c.get("q0"); !got.fifo {
		t.Fatalf("q0 is %+v", got)
	}
}
