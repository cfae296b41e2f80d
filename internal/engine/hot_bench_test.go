package engine_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// hotVariants are the forms BenchmarkHotPath measures beside each other:
// the raw-SQL baseline on database/sql, and mqlite with the hot path's
// levers off, each alone, and both (engine.HotLevers).
var hotVariants = []struct {
	name                    string
	statements, beginCommit bool
}{
	{"old", false, false},
	{"begin-commit", false, true},
	{"statements", true, false},
	{"both", true, true},
}

// hotMeter measures n messages' process CPU and heap allocations.
type hotMeter struct {
	cpu     time.Duration
	mallocs uint64
	start   time.Time
}

func startMeter() hotMeter {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return hotMeter{cpu: testdb.CPUTime(), mallocs: ms.Mallocs, start: time.Now()}
}

func (m hotMeter) report(b *testing.B, n int) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(n)/time.Since(m.start).Seconds(), "msgs/s")
	b.ReportMetric(float64((testdb.CPUTime()-m.cpu).Microseconds())/float64(n), "cpu-µs/msg")
	b.ReportMetric(float64(ms.Mallocs-m.mallocs)/float64(n), "allocs/msg")
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average %s", strings.Join(strings.Fields(string(la))[:3], " "))
	}
}

// BenchmarkHotPath measures the per-message path's levers (engine.HotLevers)
// beside the raw-SQL baseline on database/sql, in the same run and on the
// same store settings: a send of one message, and of 100, each in the
// application's own transaction on the store's handle (as BenchmarkSend in
// outbox), 20,000 messages; and the drain of a 20,000-message backlog one
// at a time and in batches of 100 (as BenchmarkDrain). It reports process
// CPU and heap allocations per message. With -count 3 the variants
// alternate.
func BenchmarkHotPath(b *testing.B) {
	defer engine.HotLevers(true, true)
	const sends = 20_000
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("send/batch=%d/raw", batch), func(b *testing.B) {
			engine.HotLevers(true, true)
			for range b.N {
				tb := testdb.Open(b, mqlite.Config{})
				db := tb.Store.DB()
				if _, err := db.Exec(`CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
					state TEXT NOT NULL, received_at INTEGER NOT NULL);
					CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`); err != nil {
					b.Fatal(err)
				}
				hotSends(b, db, sends, batch, func(ctx context.Context, tx *sql.Tx, bodies [][]byte) error {
					stmt, err := tx.PrepareContext(ctx, `INSERT INTO raw (queue, body, state, received_at) VALUES ('bench', ?, 'ready', ?)`)
					if err != nil {
						return err
					}
					defer stmt.Close()
					for _, body := range bodies {
						if _, err := stmt.ExecContext(ctx, body, 1); err != nil {
							return err
						}
					}
					return nil
				})
			}
		})
		for _, v := range hotVariants {
			b.Run(fmt.Sprintf("send/batch=%d/%s", batch, v.name), func(b *testing.B) {
				engine.HotLevers(v.statements, v.beginCommit)
				for range b.N {
					tb := testdb.Open(b, mqlite.Config{})
					tb.Queue(b, "bench", mqlite.QueueOptions{})
					msgs := make([]outbox.Message, batch)
					hotSends(b, tb.Store.DB(), sends, batch, func(ctx context.Context, tx *sql.Tx, bodies [][]byte) error {
						for i, body := range bodies {
							msgs[i] = outbox.Message{Body: body}
						}
						if batch == 1 {
							_, err := outbox.SendOne(ctx, tx, "bench", msgs[0])
							return err
						}
						_, err := outbox.SendBatch(ctx, tx, "bench", msgs)
						return err
					})
				}
			})
		}
	}
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("drain/batch=%d/raw", batch), func(b *testing.B) {
			engine.HotLevers(true, true)
			for range b.N {
				b.StopTimer()
				tb := testdb.Open(b, mqlite.Config{})
				db := tb.Store.DB()
				rawFill(b, db, drainBacklog)
				wal := testdb.NewWALCounter(b, tb.Path)
				b.StartTimer()
				m := startMeter()
				if n := rawDrain(b, db, batch, wal); n != drainBacklog {
					b.Fatalf("drained %d", n)
				}
				m.report(b, drainBacklog)
			}
		})
		for _, v := range hotVariants {
			b.Run(fmt.Sprintf("drain/batch=%d/%s", batch, v.name), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					engine.HotLevers(true, true)
					tb := testdb.Open(b, mqlite.Config{})
					tb.Queue(b, "q", mqlite.QueueOptions{})
					fill(b, tb.Store, "q", drainBacklog, "")
					engine.HotLevers(v.statements, v.beginCommit)
					b.StartTimer()
					m := startMeter()
					n := 0
					for {
						msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{Max: batch})
						if err != nil {
							b.Fatal(err)
						}
						if len(msgs) == 0 {
							break
						}
						locks := make([]mqlite.Lock, len(msgs))
						for i, msg := range msgs {
							locks[i] = msg.Lock()
						}
						if batch == 1 {
							err = tb.Store.Complete(bctx, locks[0])
						} else {
							_, err = tb.Store.CompleteBatch(bctx, locks)
						}
						if err != nil {
							b.Fatal(err)
						}
						n += len(msgs)
					}
					if n != drainBacklog {
						b.Fatalf("drained %d", n)
					}
					m.report(b, n)
				}
			})
		}
	}
}

// hotSends sends n messages of 256 random bytes in transactions of batch,
// each the application's own on db, the bodies made before the clock runs.
func hotSends(b *testing.B, db *sql.DB, n, batch int, fn func(ctx context.Context, tx *sql.Tx, bodies [][]byte) error) {
	b.Helper()
	ctx := context.Background()
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = make([]byte, 256)
		_, _ = rand.Read(bodies[i])
	}
	m := startMeter()
	for i := 0; i < n; i += batch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(ctx, tx, bodies[i:i+batch]); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	m.report(b, n)
}
