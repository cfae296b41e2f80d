package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkEightProducers measures group commit: eight goroutines send b.N
// messages in all, one message (256 random bytes, an increasing MessageID)
// per transaction, on one store's file and settings (WAL; synchronous
// NORMAL, then FULL). "grouped" is Store.Tx with outbox.SendOne: the
// transactions that arrive while one commits share the next commit.
// "ungrouped" is the same send in a transaction each opens on st.DB()
// (InTx), which the store never groups. "raw" is the baseline: the raw
// table's INSERT, each goroutine its own transaction on the same one
// connection. It reports msgs/s and CPU per message.
//
//	go test -run '^$' -bench BenchmarkEightProducers -benchtime 20000x ./outbox
func BenchmarkEightProducers(b *testing.B) {
	for _, sync := range []mqlite.SyncMode{mqlite.SyncNormal, mqlite.SyncFull} {
		name := "normal"
		if sync == mqlite.SyncFull {
			name = "full"
		}
		b.Run(name+"/raw", func(b *testing.B) {
			st := groupBenchStore(b, sync)
			if _, err := st.DB().Exec(rawSchema); err != nil {
				b.Fatal(err)
			}
			eightProducers(b, func(ctx context.Context, _ int) error {
				return mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, rawInsert, randomBody(), 1)
					return err
				})
			})
		})
		b.Run(name+"/ungrouped", func(b *testing.B) {
			st := groupBenchStore(b, sync)
			eightProducers(b, func(ctx context.Context, i int) error {
				return mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error {
					_, err := outbox.SendOne(ctx, tx, "bench", outbox.Message{Body: randomBody(), MessageID: fmt.Sprintf("order-%09d", i)})
					return err
				})
			})
		})
		b.Run(name+"/grouped", func(b *testing.B) {
			st := groupBenchStore(b, sync)
			eightProducers(b, func(ctx context.Context, i int) error {
				return st.Tx(ctx, func(tx *mqlite.Tx) error {
					_, err := outbox.SendOne(tx.Context(), tx.SQL(), "bench", outbox.Message{Body: randomBody(), MessageID: fmt.Sprintf("order-%09d", i)})
					return err
				})
			})
		})
	}
}

// groupBenchStore opens a store with sync on a fresh file, with the queue
// "bench" and its default options.
func groupBenchStore(b *testing.B, sync mqlite.SyncMode) *mqlite.Store {
	b.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), mqlite.Config{Sync: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(context.Background(), "bench", mqlite.QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	return st
}

// eightProducers runs send b.N times over eight goroutines (i numbers the
// sends) and reports msgs/s and CPU per message.
func eightProducers(b *testing.B, send func(ctx context.Context, i int) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	cpu := testdb.CPUTime()
	b.ResetTimer()
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				if err := send(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/msg")
}
