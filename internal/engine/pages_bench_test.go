package engine_test

import (
	"fmt"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkPages reports the WAL pages one operation writes, each in its
// own transaction, on a queue that holds a 20,000-message backlog: a send
// with and without a MessageID, a claim of one message and its completion.
// Pages are WAL frames, read from the wal-index after each commit.
func BenchmarkPages(b *testing.B) {
	const ops = 1600
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "q", mqlite.QueueOptions{})
	fill(b, tb.Store, "q", drainBacklog, "")
	wal := testdb.NewWALCounter(b, tb.Path)
	body := make([]byte, 256)
	measure := func(name string, op func(i int)) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				wal.Step()
				start := wal.Frames
				for i := range ops {
					op(i)
					wal.Step()
				}
				b.ReportMetric(float64(wal.Frames-start)/ops, "pages/op")
			}
		})
	}
	seq := 0
	measure("send-id", func(int) {
		seq++
		if _, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body, MessageID: fmt.Sprintf("x-%d", seq)}); err != nil {
			b.Fatal(err)
		}
	})
	measure("send-noid", func(int) {
		if _, err := outbox.Send(bctx, tb.Store, "q", outbox.Message{Body: body}); err != nil {
			b.Fatal(err)
		}
	})
	var locks []mqlite.Lock
	measure("claim", func(int) {
		ms, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{})
		if err != nil || len(ms) != 1 {
			b.Fatal(err, len(ms))
		}
		locks = append(locks, ms[0].Lock())
	})
	measure("complete", func(i int) {
		if err := tb.Store.Complete(bctx, locks[i]); err != nil {
			b.Fatal(err)
		}
	})
	// In batches of k: pages per message.
	for _, k := range []int{2, 4, 8, 12, 16, 100} {
		locks = locks[:0]
		batches := ops / k
		measureN := func(name string, op func(i int)) {
			b.Run(fmt.Sprintf("%s-%d", name, k), func(b *testing.B) {
				for range b.N {
					wal.Step()
					start := wal.Frames
					for i := range batches {
						op(i)
						wal.Step()
					}
					b.ReportMetric(float64(wal.Frames-start)/float64(batches*k), "pages/op")
				}
			})
		}
		measureN("claim", func(int) {
			ms, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{Max: k})
			if err != nil || len(ms) != k {
				b.Fatal(err, len(ms))
			}
			for _, m := range ms {
				locks = append(locks, m.Lock())
			}
		})
		measureN("complete", func(i int) {
			if _, err := tb.Store.CompleteBatch(bctx, locks[i*k:(i+1)*k]); err != nil {
				b.Fatal(err)
			}
		})
	}
}
