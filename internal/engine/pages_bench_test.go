package engine_test

import (
	"fmt"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkPages reports the WAL pages per message of operations each in
// its own transaction, on a queue that holds a 20,000-message backlog: a
// send with and without a MessageID, then claims and completions of k
// messages per call (k = 1 completes through Complete, the others through
// CompleteBatch). Pages are WAL frames, read from the wal-index after each
// commit.
func BenchmarkPages(b *testing.B) {
	const ops = 1600 // messages per sub-benchmark
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "q", mqlite.QueueOptions{})
	fill(b, tb.Store, "q", drainBacklog, "")
	wal := testdb.NewWALCounter(b, tb.Path)
	body := make([]byte, 256)
	// measure runs op for call 0, 1, ... until ops messages went, k per
	// call.
	measure := func(name string, k int, op func(call int)) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				wal.Step()
				start := wal.Frames
				for call := range ops / k {
					op(call)
					wal.Step()
				}
				b.ReportMetric(float64(wal.Frames-start)/float64(ops/k*k), "pages/op")
			}
		})
	}
	seq := 0
	measure("send-id", 1, func(int) {
		seq++
		if _, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body, MessageID: fmt.Sprintf("x-%d", seq)}); err != nil {
			b.Fatal(err)
		}
	})
	measure("send-noid", 1, func(int) {
		if _, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body}); err != nil {
			b.Fatal(err)
		}
	})
	for _, k := range []int{1, 2, 4, 8, 12, 16, 100} {
		var locks []mqlite.Lock
		measure(fmt.Sprintf("claim-%d", k), k, func(int) {
			ms, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{Max: k})
			if err != nil || len(ms) != k {
				b.Fatal(err, len(ms))
			}
			for _, m := range ms {
				locks = append(locks, m.Lock())
			}
		})
		measure(fmt.Sprintf("complete-%d", k), k, func(call int) {
			var err error
			if k == 1 {
				err = tb.Store.Complete(bctx, locks[call])
			} else {
				_, err = tb.Store.CompleteBatch(bctx, locks[call*k:(call+1)*k])
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
