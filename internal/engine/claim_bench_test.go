package engine_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

const drainBacklog = 20_000

var bctx = context.Background()

// fill sends n messages of 256 bytes to queue q in batches of 1,000. A
// non-empty group puts every message in it.
func fill(b *testing.B, st *mqlite.Store, q string, n int, group string) {
	b.Helper()
	body := make([]byte, 256)
	for done := 0; done < n; {
		k := min(1000, n-done)
		msgs := make([]outbox.Message, k)
		for i := range msgs {
			msgs[i] = outbox.Message{Body: body, MessageID: fmt.Sprintf("%s-%d", q, done+i), GroupID: group}
		}
		_, err := outbox.Send(bctx, st, q, msgs...)
		if err != nil {
			b.Fatal(err)
		}
		done += k
	}
}

// BenchmarkDrain drains a 20,000-message backlog with receive+complete, one
// at a time and in batches of 100, beside the raw-SQL baseline
// in the same run and on the same store settings (automatic checkpoints
// on): a table (id, queue, body, state, received_at) with one partial index
// over the ready rows, claimed by an UPDATE … RETURNING of the lowest ids
// and completed by a DELETE, with no tokens, lease checks or receipts. Each
// claim and each completion is its own transaction in both. With -count 3
// the two alternate.
func BenchmarkDrain(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("raw/batch=%d", batch), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				tb := testdb.Open(b, mqlite.Config{})
				db := tb.Store.DB()
				rawFill(b, db, drainBacklog)
				wal := testdb.NewWALCounter(b, tb.Path)
				b.StartTimer()
				start, cpu := time.Now(), testdb.CPUTime()
				n := rawDrain(b, db, batch, wal)
				if n != drainBacklog {
					b.Fatalf("drained %d", n)
				}
				b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
				b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/float64(n), "cpu-µs/msg")
				b.ReportMetric(float64(wal.Frames*(engine.PageSize+24))/float64(n), "walB/msg")
			}
		})
		b.Run(fmt.Sprintf("mqlite/batch=%d", batch), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				tb := testdb.Open(b, mqlite.Config{})
				tb.Queue(b, "q", mqlite.QueueOptions{})
				fill(b, tb.Store, "q", drainBacklog, "")
				wal := testdb.NewWALCounter(b, tb.Path)
				b.StartTimer()
				start, cpu := time.Now(), testdb.CPUTime()
				n := 0
				for {
					got := receiveComplete(b, tb.Store, "q", batch, wal.Step)
					if got == 0 {
						break
					}
					n += got
				}
				if n != drainBacklog {
					b.Fatalf("drained %d", n)
				}
				b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
				b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/float64(n), "cpu-µs/msg")
				b.ReportMetric(float64(wal.Frames*(engine.PageSize+24))/float64(n), "walB/msg")
			}
		})
	}
}

func rawFill(b *testing.B, db *sql.DB, n int) {
	b.Helper()
	if _, err := db.Exec(`CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
			state TEXT NOT NULL, received_at INTEGER NOT NULL);
		CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`); err != nil {
		b.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 256)
	for range n {
		if _, err := tx.Exec(`INSERT INTO raw (queue, body, state, received_at) VALUES ('q', ?, 'ready', 1)`, body); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// rawDrain claims batch rows (the lowest ids) in one transaction and deletes
// them in another, like Receive followed by a settlement, until none is
// left.
func rawDrain(b *testing.B, db *sql.DB, batch int, wal *testdb.WALCounter) int {
	return rawDrainN(b, db, batch, math.MaxInt, wal)
}

// receiveComplete receives up to batch messages of the queue q and
// completes them (Complete for one, CompleteBatch for more), calling step
// after each of the two calls, and returns how many it received.
func receiveComplete(b *testing.B, st *mqlite.Store, q string, batch int, step func()) int {
	msgs, err := st.Receive(bctx, q, mqlite.ReceiveOptions{Max: batch})
	if err != nil {
		b.Fatal(err)
	}
	step()
	if len(msgs) == 0 {
		return 0
	}
	locks := make([]mqlite.Lock, len(msgs))
	for i, m := range msgs {
		locks[i] = m.Lock()
	}
	if batch == 1 {
		err = st.Complete(bctx, locks[0])
	} else {
		_, err = st.CompleteBatch(bctx, locks)
	}
	if err != nil {
		b.Fatal(err)
	}
	step()
	return len(msgs)
}

// BenchmarkClaimCost claims (and abandons) the one claimable message of a
// queue that sits next to rows that are not claimable: nothing, a 200,000-row
// backlog of locked, scheduled and dead-lettered messages, or a 20,000-message
// group blocked behind its locked head. Claim cost must not grow with them.
func BenchmarkClaimCost(b *testing.B) {
	const far = int64(1) << 50 // a lease or due time that never comes
	for _, tc := range []struct {
		name  string
		setup string
	}{
		{"empty", ``},
		{"backlog=200k", `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
			INSERT INTO mqlite_messages (queue, state, visible_at, locked_until, lock_token, enqueued_at, content_key, body_len, body)
			SELECT 'q', CASE i % 3 WHEN 0 THEN 'locked' WHEN 1 THEN 'scheduled' ELSE 'dead_lettered' END,
			       ?1, ?1, 'tok', 0, x'00', 256, zeroblob(256) FROM n`},
		{"blocked-group=20k", `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
			INSERT INTO mqlite_messages (queue, state, held, locked_until, lock_token, enqueued_at, group_id, content_key, body_len, body)
			SELECT 'q', CASE i WHEN 1 THEN 'locked' ELSE 'active' END, i > 1, ?1, 'tok', 0, 'g', x'00', 256, zeroblob(256) FROM n`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tb := testdb.Open(b, mqlite.Config{})
			tb.Queue(b, "q", mqlite.QueueOptions{DedupWindow: -1, MaxDeliveryCount: mqlite.MaxDeliveryLimit})
			if tc.setup != "" {
				if _, err := tb.Store.DB().Exec(tc.setup, far); err != nil {
					b.Fatal(err)
				}
			}
			fill(b, tb.Store, "q", 1, "") // the one claimable message, newest of all
			cpu := testdb.CPUTime()
			b.ResetTimer()
			for range b.N {
				msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{})
				if err != nil || len(msgs) != 1 {
					b.Fatalf("receive: %d messages, %v", len(msgs), err)
				}
				if err := tb.Store.Abandon(bctx, msgs[0].Lock(), 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
