package outbox_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkSendTopic measures a send to a topic with 1, 4 and 16
// subscriptions (every one taking every message) beside a send to a plain
// queue, on the store's real settings (automatic checkpoints on), one
// 256-byte message per transaction. msgs/s counts sends; copies/s the rows
// written.
func BenchmarkSendTopic(b *testing.B) {
	for _, subs := range []int{0, 1, 4, 16} {
		name := "queue"
		if subs > 0 {
			name = fmt.Sprintf("topic/subs=%d", subs)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st, err := mqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), mqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			target := "bench"
			if subs == 0 {
				err = st.CreateQueue(ctx, target, mqlite.QueueOptions{})
			} else {
				err = st.CreateTopic(ctx, target)
				for i := 0; err == nil && i < subs; i++ {
					err = st.CreateSubscription(ctx, target, fmt.Sprintf("sub-%02d", i), mqlite.SubscriptionOptions{})
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				_, err := outbox.Send(ctx, st, target, outbox.Message{Body: randomBody()})
				if err != nil {
					b.Fatal(err)
				}
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/secs, "msgs/s")
			b.ReportMetric(float64(b.N*max(subs, 1))/secs, "copies/s")
		})
	}
}
