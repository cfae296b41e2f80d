package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"

	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// The benchmarks run Loop on a real store with the wall clock. Reproduce
// the figures of docs/benchmark.md with
//
//	go test -run '^$' -bench 'BenchmarkLoopLatency' -benchtime 1000x ./consumer # 1,000 messages
//	go test -run '^$' -bench 'BenchmarkLoopThroughput' -benchtime 20000x ./consumer
//	go test -run '^$' -bench 'BenchmarkLoopIdleCPU' -benchtime 1x ./consumer

// benchLoopStore opens a store with the wall clock on a fresh file, with
// queue "q" (de-duplication off: the benchmarks send many equal bodies).
func benchLoopStore(b *testing.B) *mqlite.Store {
	b.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(b.TempDir(), "mq.db"), mqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{DedupWindow: -1}); err != nil {
		b.Fatal(err)
	}
	return st
}

// runBenchLoop runs Loop in the background until the benchmark ends.
func runBenchLoop(b *testing.B, st consumer.Store, h consumer.Handler, opts consumer.LoopConfig) {
	b.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consumer.Loop(lctx, st, "q", h, opts) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
}

// BenchmarkLoopLatency measures, for b.N messages sent one at a time, the
// time from the commit of the transaction that sent the message with
// outbox.SendOne to the start of its handler in a Loop waiting on the
// queue. It reports the median and the 99th percentile. "store-settings"
// runs the store as it comes; "no-autocheckpoint" turns SQLite's automatic
// WAL checkpoint off, to show what the checkpoints that run inside a commit
// add to the tail.
func BenchmarkLoopLatency(b *testing.B) {
	b.Run("store-settings", func(b *testing.B) { benchLatency(b, false) })
	b.Run("no-autocheckpoint", func(b *testing.B) { benchLatency(b, true) })
}

func benchLatency(b *testing.B, noCheckpoint bool) {
	st := benchLoopStore(b)
	if noCheckpoint {
		if _, err := st.DB().Exec("PRAGMA wal_autocheckpoint = 0"); err != nil {
			b.Fatal(err)
		}
	}
	var committing atomic.Int64 // UnixNano just before Commit
	started := make(chan time.Duration, 1)
	runBenchLoop(b, st, func(ctx context.Context, m mqlite.Message) error {
		started <- time.Duration(time.Now().UnixNano() - committing.Load())
		return nil
	}, consumer.LoopConfig{Concurrency: 1})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	body := make([]byte, 256)
	b.ResetTimer()
	for i := range b.N {
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: body, MessageID: fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
		committing.Store(time.Now().UnixNano())
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		select {
		case d := <-started:
			lat = append(lat, d)
		case <-time.After(10 * time.Second):
			b.Fatalf("message %d never reached the handler", i)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkLoopIdleCPU measures the CPU time the whole process uses while a
// Loop waits on an empty queue for 2 seconds, as a share of one core. It
// ignores b.N: run it with -benchtime 1x.
func BenchmarkLoopIdleCPU(b *testing.B) {
	st := benchLoopStore(b)
	runBenchLoop(b, st, func(context.Context, mqlite.Message) error { return nil }, consumer.LoopConfig{Concurrency: 8})
	time.Sleep(100 * time.Millisecond) // let Loop start and settle in its wait
	const idle = 2 * time.Second
	b.ResetTimer()
	before, wall := testdb.CPUTime(), time.Now()
	time.Sleep(idle)
	used, elapsed := testdb.CPUTime()-before, time.Since(wall)
	b.StopTimer()
	b.ReportMetric(100*float64(used)/float64(elapsed), "cpu-%")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLoopThroughput measures how fast a Loop (Concurrency 8, a no-op
// handler) drains b.N messages: half are queued before it starts, the other
// half a producer sends while it runs, in transactions of 10. "batched"
// lets Loop complete through Store.CompleteBatch; "one-by-one" hides it, so
// every message is completed in its own commit.
func BenchmarkLoopThroughput(b *testing.B) {
	b.Run("batched", func(b *testing.B) {
		st := benchLoopStore(b)
		benchThroughput(b, st, st)
	})
	b.Run("one-by-one", func(b *testing.B) {
		st := benchLoopStore(b)
		benchThroughput(b, st, oneByOne{st})
	})
}

func benchThroughput(b *testing.B, st *mqlite.Store, src consumer.Store) {
	const perTx = 10
	ctx := context.Background()
	body := make([]byte, 256)
	send := func(n int) error {
		for n > 0 {
			k := min(n, perTx)
			msgs := make([]outbox.Message, k)
			for i := range msgs {
				msgs[i] = outbox.Message{Body: body}
			}
			if _, err := outbox.Send(ctx, st, "q", msgs...); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	backlog := b.N / 2
	if err := send(backlog); err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	all := make(chan struct{})
	total := int64(b.N)
	b.ResetTimer()
	start, cpu0 := time.Now(), testdb.CPUTime()
	runBenchLoop(b, src, func(context.Context, mqlite.Message) error {
		if handled.Add(1) == total {
			close(all)
		}
		return nil
	}, consumer.LoopConfig{Concurrency: 8})
	produced := make(chan error, 1)
	go func() { produced <- send(b.N - backlog) }()
	if err := <-produced; err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal(errors.New("Loop did not drain the queue"))
	}
	elapsed, cpu := time.Since(start), testdb.CPUTime()-cpu0
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	// Process CPU per message: the producer's sends, the claims and the
	// completions together.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/msg")
}
