package mqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkAttemptHistory measures the history of failed deliveries in
// one run, on a store that keeps it (the default, 10 attempts) and one
// that keeps none (AttemptHistory -1, the statements of the layout before
// it but for the column the claim reads): a claim and a completion of a
// message that never fails, and a claim and an Abandon with a reason of a
// message that fails every time (its history full, 10 attempts, after
// the first ten).
func BenchmarkAttemptHistory(b *testing.B) {
	for _, op := range []string{"claim+complete", "claim+abandon"} {
		for _, tc := range []struct {
			name    string
			history int
		}{{"off", -1}, {"on", 0}} {
			b.Run(op+"/"+tc.name, func(b *testing.B) {
				bd := testdb.Open(b, mqlite.Config{AttemptHistory: tc.history})
				bd.Queue(b, "q", mqlite.QueueOptions{LockDuration: time.Hour, MaxDeliveryCount: 10_000})
				ctx := context.Background()
				n := b.N
				if op == "claim+abandon" {
					n = b.N/9_000 + 1 // each fails up to 10,000 times
				}
				msgs := make([]outbox.Message, n)
				for i := range msgs {
					msgs[i] = outbox.Message{Body: make([]byte, 200)}
				}
				for len(msgs) > 0 {
					k := min(len(msgs), 1000)
					bd.Send(b, "q", msgs[:k]...)
					msgs = msgs[k:]
				}
				b.ResetTimer()
				for range b.N {
					ms, err := bd.Store.Receive(ctx, "q", mqlite.ReceiveOptions{})
					if err != nil || len(ms) != 1 {
						b.Fatalf("receive: %d, %v", len(ms), err)
					}
					if op == "claim+complete" {
						err = bd.Store.Complete(ctx, ms[0].Lock())
					} else {
						err = bd.Store.AbandonWithReason(ctx, ms[0].Lock(), 0, "the payment service said 503")
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
