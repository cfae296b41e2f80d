package engine_test

import (
	"context"
	"database/sql"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// largeBody is the body of BenchmarkLargeMessage: the largest message a
// store takes (MaxMessageBytesLimit) less room for its metadata.
const largeBody = mqlite.MaxMessageBytesLimit - 1024

// BenchmarkLargeMessage measures the WAL that one state change of a large
// message appends: claim, renew, abandon and defer of a 16 MiB message
// (mqlite), beside the raw baseline's UPDATE of the state of a row that
// holds the same body inline. A state change must not rewrite the body.
func BenchmarkLargeMessage(b *testing.B) {
	body := make([]byte, largeBody)
	b.Run("raw", func(b *testing.B) {
		tb := testdb.Open(b, mqlite.Config{})
		db := tb.Store.DB()
		if _, err := db.Exec(`CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
			state TEXT NOT NULL, received_at INTEGER NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO raw (queue, body, state, received_at) VALUES ('q', ?, 'ready', 1)`, body); err != nil {
			b.Fatal(err)
		}
		wal := testdb.NewWALCounter(b, tb.Path)
		b.ResetTimer()
		for i := range b.N {
			state := []string{"locked", "ready"}[i%2]
			if _, err := db.Exec(`UPDATE raw SET state = ?, received_at = ? WHERE id = 1`, state, i); err != nil {
				b.Fatal(err)
			}
			wal.Step()
		}
		b.ReportMetric(float64(wal.Frames*(engine.PageSize+24))/float64(b.N), "walB/op")
	})
	b.Run("mqlite", func(b *testing.B) {
		tb := testdb.Open(b, mqlite.Config{MaxMessageBytes: mqlite.MaxMessageBytesLimit})
		tb.Queue(b, "q", mqlite.QueueOptions{})
		_, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body})
		if err != nil {
			b.Fatal(err)
		}
		wal := testdb.NewWALCounter(b, tb.Path)
		per := map[string]int64{}
		step := func(op string, f func() error) {
			before := wal.Frames
			if err := f(); err != nil {
				b.Fatalf("%s: %v", op, err)
			}
			wal.Step()
			per[op] += wal.Frames - before
		}
		b.ResetTimer()
		for range b.N {
			var m mqlite.Message
			step("claim", func() error {
				msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{})
				if err == nil && len(msgs) == 1 {
					m = msgs[0]
				}
				return err
			})
			step("renew", func() error { _, err := tb.Store.Renew(bctx, m.Lock()); return err })
			step("defer", func() error { return tb.Store.Defer(bctx, m.Lock()) })
			step("claim", func() error {
				var err error
				m, err = tb.Store.ReceiveDeferred(bctx, "q", m.Seq)
				return err
			})
			step("abandon", func() error { return tb.Store.Abandon(bctx, m.Lock(), 0) })
		}
		for op, frames := range per {
			n := b.N
			if op == "claim" {
				n *= 2
			}
			b.ReportMetric(float64(frames*(engine.PageSize+24))/float64(n), "walB/"+op)
		}
	})
}

// bigQueue is the number of messages beside the queue that Stats and the
// janitor benchmarks ask about.
const bigQueue = 1_000_000

// fillRaw inserts n active messages of a 16-byte body into queue straight
// into the table: the fastest way to stand a large queue up.
func fillRaw(b *testing.B, db *sql.DB, queue string, n int) {
	b.Helper()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
		INSERT INTO mqlite_messages (queue, enqueued_at, content_key, body_len, body)
		SELECT ?1, i, x'00', 16, zeroblob(16) FROM n`, queue, n); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStats reads the Stats of a 5,000-message queue beside a queue of
// a million, and of the million itself: Stats must cost in proportion to
// the queue asked about.
func BenchmarkStats(b *testing.B) {
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "big", mqlite.QueueOptions{})
	tb.Queue(b, "small", mqlite.QueueOptions{})
	fillRaw(b, tb.Store.DB(), "big", bigQueue)
	fillRaw(b, tb.Store.DB(), "small", 5000)
	for _, q := range []string{"small", "big"} {
		b.Run(q, func(b *testing.B) {
			for range b.N {
				st, err := tb.Store.Stats(bctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if st.Active == 0 {
					b.Fatal("no messages")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/stats")
		})
	}
}

// timedDB records the longest statement run through it, and how many took
// over 5 ms, on the wall clock and in CPU time of the calling thread (the
// statement runs on it: the caller locks its goroutine to the thread).
// The wall clock is what other callers wait; the thread's CPU is what the
// statement would hold on an idle machine, without the waits for a core
// that a loaded machine adds.
type timedDB struct {
	*sql.DB
	longest, longestCPU time.Duration
	statements          int
	slow, slowCPU       int
}

func (t *timedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	start, cpu := time.Now(), threadCPU()
	res, err := t.DB.ExecContext(ctx, query, args...)
	d, c := time.Since(start), threadCPU()-cpu
	t.longest, t.longestCPU = max(t.longest, d), max(t.longestCPU, c)
	t.statements++
	if d > 5*time.Millisecond {
		t.slow++
	}
	if c > 5*time.Millisecond {
		t.slowCPU++
	}
	return res, err
}

// threadCPU is the CPU time (user and system) of the calling OS thread,
// from the scheduler's clock: getrusage's per-thread times come in whole
// ticks (4 ms here), which made a 1 ms statement look like 4.
func threadCPU() time.Duration {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID on Linux
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkJanitor expires a million dedup keys at once and reports how
// long the janitor held the connection at most (its longest statement),
// in all, and the WAL it appended: nothing in the background may hold the
// connection for more than a few milliseconds.
func BenchmarkJanitor(b *testing.B) {
	for range b.N {
		b.StopTimer()
		tb := testdb.Open(b, mqlite.Config{})
		tb.Queue(b, "q", mqlite.QueueOptions{})
		if _, err := tb.Store.DB().Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
			INSERT INTO mqlite_dedup (queue, key, seq, expires_at) SELECT 'q', randomblob(16), i, 1 FROM n`, bigQueue); err != nil {
			b.Fatal(err)
		}
		wal := testdb.NewWALCounter(b, tb.Path)
		db := &timedDB{DB: tb.Store.DB()}
		runtime.LockOSThread()
		b.StartTimer()
		start := time.Now()
		stop := engine.CheckpointEvery(bctx, tb.Store.DB(), engine.SweepCheckpointEvery, nil) // as the store runs it
		n, err := engine.Janitor(bctx, &stepDB{timedDB: db, wal: wal}, 2, stop)
		runtime.UnlockOSThread()
		if err != nil {
			b.Fatal(err)
		}
		if n != bigQueue {
			b.Fatalf("janitor deleted %d", n)
		}
		b.ReportMetric(float64(db.longest.Microseconds())/1000, "max-ms/stmt")
		b.ReportMetric(time.Since(start).Seconds(), "s/total")
		b.ReportMetric(float64(db.statements), "stmts")
		b.ReportMetric(float64(db.slow), "stmts>5ms")
		b.ReportMetric(float64(db.longestCPU.Microseconds())/1000, "max-cpu-ms/stmt")
		b.ReportMetric(float64(db.slowCPU), "stmts>5ms-cpu")
		b.ReportMetric(float64(wal.Frames*(engine.PageSize+24))/(1<<20), "walMiB")
	}
}

// stepDB counts the WAL frames of every statement.
type stepDB struct {
	*timedDB
	wal *testdb.WALCounter
}

func (s *stepDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := s.timedDB.ExecContext(ctx, query, args...)
	s.wal.Step()
	return res, err
}

// BenchmarkJanitorReceipts turns the completed rows of 50,000 completions
// (each Complete of its own) into receipt rows, as the janitor's pass does
// after them, and reports its longest statement (on the wall and in CPU)
// and the WAL it appended.
func BenchmarkJanitorReceipts(b *testing.B) {
	const completions = 50_000
	for range b.N {
		b.StopTimer()
		tb := testdb.Open(b, mqlite.Config{})
		tb.Queue(b, "q", mqlite.QueueOptions{})
		fill(b, tb.Store, "q", completions, "")
		for done := 0; done < completions; {
			msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{Max: 100})
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range msgs {
				if err := tb.Store.Complete(bctx, m.Lock()); err != nil {
					b.Fatal(err)
				}
			}
			done += len(msgs)
		}
		// The moment of the last completion, on the store's clock: every
		// completed row is turned, and gets its receipt row.
		now := testdb.Int(b, tb.Store.DB(), `SELECT max(settled_at) FROM mqlite_messages`)
		wal := testdb.NewWALCounter(b, tb.Path)
		db := &timedDB{DB: tb.Store.DB()}
		runtime.LockOSThread()
		b.StartTimer()
		start := time.Now()
		var total int64
		stop := engine.CheckpointEvery(bctx, tb.Store.DB(), engine.SweepCheckpointEvery, nil) // as the store runs it
		for {
			n, err := engine.CompactReceipts(bctx, &stepDB{timedDB: db, wal: wal}, now)
			if err != nil {
				b.Fatal(err)
			}
			total += n
			if n < engine.ReceiptBatch || stop() {
				break
			}
		}
		runtime.UnlockOSThread()
		if receipts := testdb.Int(b, tb.Store.DB(), `SELECT count(*) FROM mqlite_settlement_receipts`); total != completions || receipts != completions {
			b.Fatalf("turned %d completed rows into %d receipts", total, receipts)
		}
		b.ReportMetric(float64(db.longest.Microseconds())/1000, "max-ms/stmt")
		b.ReportMetric(time.Since(start).Seconds(), "s/total")
		b.ReportMetric(float64(db.statements), "stmts")
		b.ReportMetric(float64(db.slowCPU), "stmts>5ms-cpu")
		b.ReportMetric(float64(db.longestCPU.Microseconds())/1000, "max-cpu-ms/stmt")
		b.ReportMetric(float64(wal.Frames*(engine.PageSize+24))/completions, "walB/msg")
	}
}
