package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/metrics"
)

// scrapeQueueSize is the big queue of BenchmarkScrape.
const scrapeQueueSize = 1_000_000

// fill inserts n messages of a 16-byte body into queue straight into the
// table, the last dead of them dead-lettered: the fastest way to stand a
// large queue up (the store's hooks still count them).
func fill(b *testing.B, st *mqlite.Store, queue string, n, dead int) {
	b.Helper()
	if _, err := st.DB().Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
		INSERT INTO mqlite_messages (queue, state, enqueued_at, dead_lettered_at, content_key, body_len, body)
		SELECT ?1, CASE WHEN i > ?2 - ?3 THEN 'dead_lettered' ELSE 'active' END, i,
		       CASE WHEN i > ?2 - ?3 THEN i ELSE 0 END, x'00', 16, zeroblob(16) FROM n`, queue, n, dead); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkScrape gathers every metric of the Collector (the gauges of
// counts and bytes from memory, the two age gauges by two index seeks per
// queue) on a file of ten queues of ten messages ("small", the baseline),
// then on the same file with a queue of a million messages beside them
// ("1M"); "stats 1M" is the Stats of that queue, the exact count a
// dashboard would otherwise ask for.
func BenchmarkScrape(b *testing.B) {
	tb := testdb.Open(b, mqlite.Config{})
	for _, q := range []string{"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9"} {
		tb.Queue(b, q, mqlite.QueueOptions{})
		fill(b, tb.Store, q, 10, 1)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(tb.Store, nil))
	scrape := func(b *testing.B) {
		for range b.N {
			fams, err := reg.Gather()
			if err != nil || len(fams) == 0 {
				b.Fatalf("gather: %v, %d families", err, len(fams))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/scrape")
	}
	b.Run("small", scrape)
	tb.Queue(b, "big", mqlite.QueueOptions{})
	fill(b, tb.Store, "big", scrapeQueueSize, 1000)
	b.Run("1M", scrape)
	b.Run("stats 1M", func(b *testing.B) {
		for range b.N {
			if _, err := tb.Store.Stats(context.Background(), "big"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/stats")
	})
}
