package engine_test

import (
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestStateChangeKeepsLargeBody pins the promise that a claim,
// renewal or settlement of a large message never rewrites its body: each
// appends a few pages of WAL, not the body's size.
func TestStateChangeKeepsLargeBody(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	body := make([]byte, 512<<10)
	if _, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body}); err != nil {
		t.Fatal(err)
	}
	wal := testdb.NewWALCounter(t, tb.Path)
	const most = 8 // pages per state change; the body is 512
	check := func(op string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		before := wal.Frames
		wal.Step()
		if n := wal.Frames - before; n > most {
			t.Fatalf("%s appended %d WAL pages, want at most %d", op, n, most)
		}
	}
	msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 || len(msgs[0].Body) != len(body) {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	check("claim", nil)
	_, err = tb.Store.Renew(bctx, msgs[0].Lock())
	check("renew", err)
	check("defer", tb.Store.Defer(bctx, msgs[0].Lock()))
	m, err := tb.Store.ReceiveDeferred(bctx, "q", msgs[0].Seq)
	check("claim deferred", err)
	check("abandon", tb.Store.Abandon(bctx, m.Lock(), 0))
	msgs, err = tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 || len(msgs[0].Body) != len(body) {
		t.Fatalf("receive again: %d messages, %v", len(msgs), err)
	}
	check("complete", tb.Store.Complete(bctx, msgs[0].Lock()))
	// The completed row keeps the body until the janitor turns it: then both go.
	bodies := func() int64 { return testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_message_bodies`) }
	if n := bodies(); n != 1 {
		t.Fatalf("%d bodies with the completed row, want its 1", n)
	}
	if _, err := engine.CompactReceipts(bctx, tb.Store.DB(), msgs[0].LockedUntil.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if n := bodies(); n != 0 {
		t.Fatalf("%d bodies left after the janitor turned the completed row", n)
	}
}

// TestJanitorWalksDedupInChunks checks that the janitor's walk over the
// dedup keys, chunk after chunk, deletes every expired key and no other,
// whatever the keys' order and kinds.
func TestJanitorWalksDedupInChunks(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	db := tb.Store.DB()
	// 3,000 keys over two queues, content keys and MessageIDs, every
	// other one expired at 10.
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
		INSERT INTO mqlite_dedup (queue, key, seq, expires_at)
		SELECT CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END,
		       CASE WHEN i % 5 = 0 THEN 'id-' || i ELSE randomblob(16) END, i,
		       CASE WHEN i % 2 = 0 THEN 10 ELSE 1000 END FROM n`); err != nil {
		t.Fatal(err)
	}
	n, err := engine.Janitor(bctx, db, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1500 {
		t.Fatalf("janitor deleted %d keys, want the 1,500 expired", n)
	}
	if left := testdb.Int(t, db, `SELECT count(*) FROM mqlite_dedup WHERE expires_at <= 10`); left != 0 {
		t.Fatalf("%d expired keys left", left)
	}
	if kept := testdb.Int(t, db, `SELECT count(*) FROM mqlite_dedup`); kept != 1500 {
		t.Fatalf("%d keys kept, want 1,500", kept)
	}
}
