package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkGroupLatency offers 5,000 messages per second from eight
// producers (625 each, paced by a ticker of their own), each message sent
// by outbox.SendOne in its own Store.Tx, so that the sends that meet share
// group commits, to a Loop (Concurrency 8) already waiting on the queue.
// Each message's latency runs from just before its Store.Tx call (the wait
// for its group included) to the start of its handler. Reports p50-ms,
// p99-ms, max-ms and the rate achieved (msgs/s).
//
//	go test -run '^$' -bench BenchmarkGroupLatency -benchtime 10000x ./consumer
func BenchmarkGroupLatency(b *testing.B) {
	const producers, rate = 8, 5000
	st := benchLoopStore(b)
	sentAt := make([]time.Time, b.N) // written before the send, read by the handler after the commit
	lat := make(chan time.Duration, b.N)
	runBenchLoop(b, st, func(_ context.Context, m mqlite.Message) error {
		var i int
		if _, err := fmt.Sscan(m.MessageID, &i); err != nil {
			return err
		}
		lat <- time.Since(sentAt[i])
		return nil
	}, consumer.LoopConfig{Concurrency: 8})
	ctx := context.Background()
	body := make([]byte, 256)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	b.ResetTimer()
	for p := range producers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * producers / rate)
			defer tick.Stop()
			for i := p; i < b.N; i += producers {
				<-tick.C
				sentAt[i] = time.Now()
				err := st.Tx(ctx, func(tx *mqlite.Tx) error {
					_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: body, MessageID: fmt.Sprint(i)})
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	got := make([]time.Duration, 0, b.N)
	for range b.N {
		select {
		case d := <-lat:
			got = append(got, d)
		case err := <-errs:
			b.Fatal(err)
		case <-time.After(10 * time.Second):
			b.Fatalf("%d of %d messages reached the handler", len(got), b.N)
		}
	}
	b.StopTimer()
	slices.Sort(got)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(ms(got[len(got)/2]), "p50-ms")
	b.ReportMetric(ms(got[len(got)*99/100]), "p99-ms")
	b.ReportMetric(ms(got[len(got)-1]), "max-ms")
}
