package powerloss_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkSyncMode is the price of synchronous=FULL beside NORMAL in one
// run, on the machine's own disk (not the forgetful mount, whose fsync
// costs nothing): each operation is one business transaction, an orders row
// and its message, committed; then a receive and a complete of it, two
// more commits. It reports commits per second. docs/operations.md, "Power
// loss", quotes it.
func BenchmarkSyncMode(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := map[bool]string{true: "full", false: "normal"}[full]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st, err := mqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), openOpts(full))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if err := st.CreateQueue(ctx, plQueue, mqlite.QueueOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := st.DB().Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				err := st.Tx(ctx, func(tx *mqlite.Tx) error {
					seq, err := outbox.SendOne(tx.Context(), tx.SQL(), plQueue, outbox.Message{Body: fmt.Appendf(nil, "order %d", i)})
					if err != nil {
						return err
					}
					_, err = tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (seq) VALUES (?)`, seq)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				msgs, err := st.Receive(ctx, plQueue, mqlite.ReceiveOptions{})
				if err != nil || len(msgs) != 1 {
					b.Fatalf("receive: %d, %v", len(msgs), err)
				}
				if err := st.Complete(ctx, msgs[0].Lock()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(3*b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}
