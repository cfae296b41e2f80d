package mqlite_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkHandoff measures a message's way from a send to a Receive that
// sleeps for it, one message at a time, with the hand-off (the send's
// transaction claims for the Receive) and without it (the send's commit
// wakes the Receive, which claims in a transaction of its own), in the
// same run: the send-to-Receive time (p50, p99) and the WAL frames per
// message (the send, the claim, and the Complete after).
func BenchmarkHandoff(b *testing.B) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"handoff", true}, {"wake_and_claim", false}} {
		b.Run(tc.name, func(b *testing.B) {
			bd := testdb.OpenQueue(b, "q", mqlite.QueueOptions{LockDuration: time.Minute})
			mqlite.SetHandoff(bd.Store, tc.on)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := make(chan mqlite.Message)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					msgs, err := bd.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1, Wait: time.Minute})
					if err != nil {
						return
					}
					for _, m := range msgs {
						got <- m
					}
				}
			}()
			body := make([]byte, 256)
			lat := make([]time.Duration, 0, b.N)
			wal := testdb.NewWALCounter(b, bd.Path)
			b.ResetTimer()
			for i := range b.N {
				for mqlite.HandoffWaiters(bd.Store) == 0 { // the Receive sleeps, in both cases
					runtime.Gosched()
				}
				body[0], body[1], body[2] = byte(i), byte(i>>8), byte(i>>16)
				start := time.Now()
				if _, err := outbox.Send(ctx, bd.Store, "q", outbox.Message{Body: body}); err != nil {
					b.Fatal(err)
				}
				m := <-got
				lat = append(lat, time.Since(start))
				if err := bd.Store.Complete(ctx, m.Lock()); err != nil {
					b.Fatal(err)
				}
				wal.Step()
			}
			b.StopTimer()
			cancel()
			<-done
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(wal.Frames)/float64(b.N), "frames/msg")
		})
	}
}
