package replicate_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/litestream/file"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/replicate"
)

// BenchmarkCommit commits b.N transactions of one 256-byte message, each
// timed, with replication off and on (Litestream to a file replica, the
// default SyncInterval of 1s) in one run, and reports the commit latency's
// p50, p99 and maximum, the largest WAL seen after a commit, and the
// commits that failed (a busy timeout passed while Litestream held the
// file). Run it with -benchtime 20000x.
func BenchmarkCommit(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "replication=off"
		if on {
			name = "replication=on"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			path := filepath.Join(b.TempDir(), "app.db")
			st, err := mqlite.Open(ctx, path, mqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
				b.Fatal(err)
			}
			if on {
				rep, err := replicate.Start(ctx, st, replicate.Config{Client: file.NewReplicaClient(b.TempDir()), Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer rep.Close(ctx)
			}
			body := make([]byte, 256)
			took := make([]time.Duration, 0, b.N)
			var walMax int64
			failed := 0
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				_, err := outbox.Send(ctx, st, "q", outbox.Message{Body: body})
				took = append(took, time.Since(start))
				if err != nil {
					failed++
				}
				if fi, err := os.Stat(path + "-wal"); err == nil {
					walMax = max(walMax, fi.Size())
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(took[len(took)-1].Microseconds()), "max-µs")
			b.ReportMetric(float64(walMax)/(1<<20), "wal-max-MiB")
			b.ReportMetric(float64(failed), "failed")
		})
	}
}
