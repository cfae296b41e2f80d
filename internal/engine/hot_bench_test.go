package engine_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"runtime/metrics"
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

// hotTally adds up the process CPU and the heap allocations of the
// blocks of messages a variant ran.
type hotTally struct {
	cpu    time.Duration
	allocs uint64
	msgs   int
}

// heapAllocs is the number of heap objects allocated so far (cheap to read:
// no stop of the world).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// measure runs block, which handles n messages, and adds its cost to t.
func (t *hotTally) measure(n int, block func()) {
	a, c := heapAllocs(), testdb.CPUTime()
	block()
	t.cpu += testdb.CPUTime() - c
	t.allocs += heapAllocs() - a
	t.msgs += n
}

func (t *hotTally) report(b *testing.B, name string) {
	b.ReportMetric(float64(t.cpu.Microseconds())/float64(t.msgs), name+"-cpu-µs/msg")
	b.ReportMetric(float64(t.allocs)/float64(t.msgs), name+"-allocs/msg")
}

// loadAverage logs the load average of the machine.
func loadAverage(b *testing.B) {
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average %s", strings.Join(strings.Fields(string(la))[:3], " "))
	}
}

// hotBlock is how many messages a variant handles before the next one
// takes its turn: the variants alternate block by block in one store, so
// that the machine's load, which moves by the second on a shared VM,
// falls on all of them alike.
const hotBlock = 200

// BenchmarkHotPath measures the per-message path's levers
// (engine.HotLevers: the statements through the driver, BEGIN/COMMIT by
// slot) beside the raw-SQL baseline on database/sql, interleaved in one
// run on one store: the variants (raw, both levers off, each alone, both
// on) take turns in blocks of 200 messages, and each block's process CPU
// and heap allocations go to its variant. send: 20,000 messages a variant,
// one or 100 per transaction of the application's own on the store's
// handle (outbox.SendOne / SendBatch, as BenchmarkSend); drain: a backlog
// of 20,000 a variant, Receive + Complete one at a time or 100 at a time
// (as BenchmarkDrain). Metrics: <variant>-cpu-µs/msg and
// <variant>-allocs/msg.
func BenchmarkHotPath(b *testing.B) {
	defer engine.HotLevers(true, true)
	const per = 20_000
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("send/batch=%d", batch), func(b *testing.B) {
			for range b.N {
				hotSendRound(b, per, batch)
			}
		})
	}
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("drain/batch=%d", batch), func(b *testing.B) {
			for range b.N {
				hotDrainRound(b, per, batch)
			}
		})
	}
}

func hotSendRound(b *testing.B, per, batch int) {
	ctx := context.Background()
	engine.HotLevers(true, true)
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "bench", mqlite.QueueOptions{})
	db := tb.Store.DB()
	if _, err := db.Exec(`CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
		state TEXT NOT NULL, received_at INTEGER NOT NULL);
		CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`); err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, per)
	for i := range bodies {
		bodies[i] = make([]byte, 256)
		_, _ = rand.Read(bodies[i])
	}
	msgs := make([]outbox.Message, batch)
	tallies := make([]hotTally, len(hotVariants)+1) // raw last
	inTx := func(fn func(tx *sql.Tx) error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for done := 0; done < per; done += hotBlock {
		for vi := range tallies {
			if vi < len(hotVariants) {
				engine.HotLevers(hotVariants[vi].statements, hotVariants[vi].beginCommit)
			} else {
				engine.HotLevers(true, true)
			}
			tallies[vi].measure(hotBlock, func() {
				for i := done; i < done+hotBlock; i += batch {
					inTx(func(tx *sql.Tx) error {
						if vi == len(hotVariants) {
							stmt, err := tx.PrepareContext(ctx, `INSERT INTO raw (queue, body, state, received_at) VALUES ('bench', ?, 'ready', ?)`)
							if err != nil {
								return err
							}
							defer stmt.Close()
							for _, body := range bodies[i : i+batch] {
								if _, err := stmt.ExecContext(ctx, body, 1); err != nil {
									return err
								}
							}
							return nil
						}
						for k, body := range bodies[i : i+batch] {
							msgs[k] = outbox.Message{Body: body}
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
	b.StopTimer()
	hotReport(b, tallies)
}

func hotReport(b *testing.B, tallies []hotTally) {
	for vi, v := range hotVariants {
		tallies[vi].report(b, v.name)
	}
	tallies[len(hotVariants)].report(b, "raw")
	loadAverage(b)
}

func hotDrainRound(b *testing.B, per, batch int) {
	engine.HotLevers(true, true)
	tb := testdb.Open(b, mqlite.Config{})
	db := tb.Store.DB()
	tb.Queue(b, "q", mqlite.QueueOptions{})
	fill(b, tb.Store, "q", per*len(hotVariants), "")
	rawFill(b, db, per)
	tallies := make([]hotTally, len(hotVariants)+1) // raw last
	b.ResetTimer()
	for done := 0; done < per; done += hotBlock {
		for vi := range tallies {
			if vi == len(hotVariants) {
				engine.HotLevers(true, true)
				tallies[vi].measure(hotBlock, func() {
					if n := rawDrainN(b, db, batch, hotBlock, nil); n != hotBlock {
						b.Fatalf("raw drained %d", n)
					}
				})
				continue
			}
			engine.HotLevers(hotVariants[vi].statements, hotVariants[vi].beginCommit)
			tallies[vi].measure(hotBlock, func() {
				for n := 0; n < hotBlock; {
					got := receiveComplete(b, tb.Store, "q", batch, func() {})
					if got == 0 {
						b.Fatal("the backlog ran out")
					}
					n += got
				}
			})
		}
	}
	b.StopTimer()
	hotReport(b, tallies)
}

// rawDrainN drains up to n rows: claims of batch rows (the lowest ids) in
// one transaction, their deletes in another. wal (nil: none) counts the
// frames of every commit.
func rawDrainN(b *testing.B, db *sql.DB, batch, n int, wal *testdb.WALCounter) int {
	done := 0
	for done < n {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		rows, err := tx.Query(`UPDATE raw SET state = 'locked' WHERE id IN
			(SELECT id FROM raw WHERE queue = 'q' AND state = 'ready' ORDER BY id LIMIT ?) RETURNING id, body`, min(batch, n-done))
		if err != nil {
			b.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			var body []byte
			if err := rows.Scan(&id, &body); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		if wal != nil {
			wal.Step()
		}
		if len(ids) == 0 {
			return done
		}
		tx, err = db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range ids {
			if _, err := tx.Exec(`DELETE FROM raw WHERE id = ?`, id); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		if wal != nil {
			wal.Step()
		}
		done += len(ids)
	}
	return done
}
