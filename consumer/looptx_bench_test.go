package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkDrainWithEffect drains b.N messages with a handler that inserts
// one row per message, three ways, on one store's connection each:
// "looptx" (LoopTx: the row and the completion in one commit),
// "processed-table" (Loop with the pattern docs/concepts.md recommended
// before LoopTx: the row and a processed(message_id) row in one
// transaction, checked first, then Loop's own completion) and "raw-sql"
// (no mqlite: a claim transaction on a plain jobs table, then the row and
// the job's delete in one transaction). It reports messages per second.
//
//	go test -run '^$' -bench 'BenchmarkDrainWithEffect' -benchtime 5000x ./consumer
func BenchmarkDrainWithEffect(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency-%d", c), func(b *testing.B) { benchDrainLoops(b, c) })
	}
	b.Run("raw-sql", benchDrainRaw)
}

// benchDrainLoops runs the two Loop forms with concurrency handlers.
func benchDrainLoops(b *testing.B, concurrency int) {
	b.Run("looptx", func(b *testing.B) {
		st := benchEffectStore(b)
		drainLoop(b, st, func(ctx context.Context, done func()) error {
			return consumer.LoopTx(ctx, st, "q", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
				return func(ctx context.Context, tx consumer.Tx) error {
					sqlTx, err := consumer.SQL(tx)
					if err != nil {
						return err
					}
					_, err = sqlTx.ExecContext(ctx, `INSERT INTO effects (seq, body) VALUES (?, ?)`, m.Seq, m.Body)
					return err
				}, nil
			}, consumer.LoopConfig{Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler), Observer: doneAfter(b.N, done)})
		})
	})
	b.Run("processed-table", func(b *testing.B) {
		st := benchEffectStore(b)
		if _, err := st.DB().Exec(`CREATE TABLE processed (message_id TEXT PRIMARY KEY)`); err != nil {
			b.Fatal(err)
		}
		drainLoop(b, st, func(ctx context.Context, done func()) error {
			return consumer.Loop(ctx, st, "q", func(ctx context.Context, m mqlite.Message) error {
				return st.Tx(ctx, func(tx *mqlite.Tx) error {
					id := fmt.Sprintf("%s:%d", m.Queue, m.Seq)
					var one int
					err := tx.SQL().QueryRowContext(tx.Context(), `SELECT 1 FROM processed WHERE message_id = ?`, id).Scan(&one)
					if err == nil {
						return nil // done before: skip
					}
					if !errors.Is(err, sql.ErrNoRows) {
						return err
					}
					if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO effects (seq, body) VALUES (?, ?)`, m.Seq, m.Body); err != nil {
						return err
					}
					_, err = tx.SQL().ExecContext(tx.Context(), `INSERT INTO processed (message_id) VALUES (?)`, id)
					return err
				})
			}, consumer.LoopConfig{Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler), Observer: doneAfter(b.N, done)})
		})
	})
}

// benchDrainRaw is the raw SQL baseline: one claim transaction, then the
// row and the job's delete in one transaction, per message.
func benchDrainRaw(b *testing.B) {
	{
		st := benchEffectStore(b)
		db := st.DB()
		if _, err := db.Exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY, body BLOB, locked_until INTEGER NOT NULL DEFAULT 0)`); err != nil {
			b.Fatal(err)
		}
		fill(b, func(n int) error {
			_, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
				INSERT INTO jobs (body) SELECT 'body' FROM n`, n)
			return err
		})
		ctx := context.Background()
		b.ResetTimer()
		start, cpu := time.Now(), processCPU()
		for range b.N {
			var id int64
			var body []byte
			err := mqlite.InTx(ctx, db.BeginTx, func(ctx context.Context, tx *sql.Tx) error {
				now := time.Now().UnixMilli()
				return tx.QueryRowContext(ctx, `UPDATE jobs SET locked_until = ?1 + 30000
					WHERE id = (SELECT id FROM jobs WHERE locked_until < ?1 ORDER BY id LIMIT 1) RETURNING id, body`, now).Scan(&id, &body)
			})
			if err != nil {
				b.Fatal(err)
			}
			err = mqlite.InTx(ctx, db.BeginTx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO effects (seq, body) VALUES (?, ?)`, id, body); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id = ?`, id)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		reportDrain(b, time.Since(start), processCPU()-cpu)
	}
}

// reportDrain reports msgs/s over elapsed and the process's CPU per
// message, which a busy machine disturbs less than the wall clock.
func reportDrain(b *testing.B, elapsed time.Duration, cpuMicros int64) {
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if cpuMicros > 0 {
		b.ReportMetric(float64(cpuMicros)/float64(b.N), "cpu-µs/msg")
	}
}

// benchEffectStore is benchLoopStore with the application's effects table.
func benchEffectStore(b *testing.B) *mqlite.Store {
	b.Helper()
	st := benchLoopStore(b)
	if _, err := st.DB().Exec(`CREATE TABLE effects (seq INTEGER PRIMARY KEY, body BLOB)`); err != nil {
		b.Fatal(err)
	}
	return st
}

// fill writes b.N messages with send, in batches of at most 1,000.
func fill(b *testing.B, send func(n int) error) {
	b.Helper()
	for left := b.N; left > 0; left -= 1000 {
		if err := send(min(left, 1000)); err != nil {
			b.Fatal(err)
		}
	}
}

// drainLoop sends b.N messages to st's "q", then times run (a Loop on
// ctx) until the Observer given done has seen b.N completions.
func drainLoop(b *testing.B, st *mqlite.Store, run func(ctx context.Context, done func()) error) {
	b.Helper()
	fill(b, func(n int) error {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Body: []byte("body")}
		}
		_, err := outbox.Send(context.Background(), st, "q", msgs...)
		return err
	})
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	finished := make(chan struct{})
	loopErr := make(chan error, 1)
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	go func() { loopErr <- run(lctx, func() { close(finished) }) }()
	select {
	case <-finished:
	case err := <-loopErr:
		b.Fatalf("loop returned early: %v", err)
	}
	elapsed, cpuMicros := time.Since(start), processCPU()-cpu
	b.StopTimer()
	cancel()
	if err := <-loopErr; err != nil {
		b.Fatal(err)
	}
	reportDrain(b, elapsed, cpuMicros)
}

// doneAfter is an Observer that calls done at the n-th completion.
func doneAfter(n int, done func()) consumer.Observer {
	var count atomic.Int64
	return completions{n: int64(n), count: &count, done: done}
}

type completions struct {
	consumer.NopObserver
	n     int64
	count *atomic.Int64
	done  func()
}

func (c completions) Completed(mqlite.Message, time.Duration) {
	if c.count.Add(1) == c.n {
		c.done()
	}
}
