package engine_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// loadDuration is how long BenchmarkLatency/load sends (60 s).
const loadDuration = 60 * time.Second

// loadProducers and loadInterval pace the load: 8 producers, each sending
// one message every 8 ms, 1,000 messages per second in all, about a fifth of
// what the store takes in single-message transactions on the 2-core VM of
// docs/benchmark.md. Unpaced producers outrun any consumer of one
// connection, and the latency measured is then the backlog's, not the
// store's. "load5000" offers 5,000 messages per second (one every 1.6 ms
// from each producer) and times each message from its send's commit.
const (
	loadProducers  = 8
	loadInterval   = 8 * time.Millisecond
	load5kInterval = 1600 * time.Microsecond
)

// BenchmarkLatency measures send→handler latency through consumer.Loop on
// a real store with the wall clock and the store's settings, timed from
// before the sending transaction begins to the start of the handler (the
// body carries the start time). "single": one message at a time, each sent
// once the previous one reached its handler, b.N messages. "load": 8
// producers send single messages in their own transactions, paced (see
// loadInterval), for loadDuration while a Loop with Concurrency 16 drains
// the queue; every message is timed (run it with -benchtime 1x).
func BenchmarkLatency(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		st, got, _ := latencyStore(b, 1)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			send(b, st)
			select {
			case a := <-got:
				lat = append(lat, a.at.Sub(a.sent))
			case <-time.After(10 * time.Second):
				b.Fatal("a message never reached its handler")
			}
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
	b.Run("load", func(b *testing.B) { loadLatency(b, loadInterval, false) })
	b.Run("load5000", func(b *testing.B) { loadLatency(b, load5kInterval, true) })
}

// loadLatency runs loadProducers producers, each sending one message every
// interval for loadDuration, while a Loop with Concurrency 16 drains the
// queue, and reports the latency of every message: from before its send's
// transaction began, or, fromCommit, from its commit.
func loadLatency(b *testing.B, interval time.Duration, fromCommit bool) {
	st, got, stopLoop := latencyStore(b, 16)
	var arrivals []arrival
	collected := make(chan struct{})
	go func() {
		for a := range got {
			arrivals = append(arrivals, a)
		}
		close(collected)
	}()
	var wg sync.WaitGroup
	stop := time.Now().Add(loadDuration)
	var sent, committed sync.Map // producer -> messages sent; seq -> commit time
	for p := range loadProducers {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			n := 0
			for now := range tick.C {
				if now.After(stop) {
					break
				}
				seq := send(b, st)
				committed.Store(seq, time.Now())
				n++
			}
			sent.Store(p, n)
		})
	}
	wg.Wait()
	total := 0
	sent.Range(func(_, v any) bool { total += v.(int); return true })
	// Every message sent reaches its handler; wait for the last.
	deadline := time.After(30 * time.Second)
	for {
		qs, err := st.Stats(bctx, "q")
		if err != nil {
			b.Fatal(err)
		}
		if qs.Total() == 0 {
			break
		}
		select {
		case <-deadline:
			b.Fatalf("%d messages still queued", qs.Total())
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.StopTimer()
	stopLoop()
	<-collected
	if len(arrivals) < total {
		b.Fatalf("%d of %d messages reached a handler", len(arrivals), total)
	}
	lat := make([]time.Duration, 0, len(arrivals))
	for _, a := range arrivals {
		from := a.sent
		if fromCommit {
			c, ok := committed.Load(a.seq)
			if !ok {
				b.Fatalf("seq %d reached its handler without a commit", a.seq)
			}
			from = c.(time.Time)
		}
		lat = append(lat, a.at.Sub(from))
	}
	reportLatency(b, lat)
	b.ReportMetric(float64(total)/loadDuration.Seconds(), "msgs/s")
}

// arrival is a message reaching its handler: its seq, the time written in
// its body before its send began, and the time it arrived.
type arrival struct {
	seq      int64
	sent, at time.Time
}

// latencyStore opens a store with the queue "q" (de-duplication on, the
// default) and runs a Loop with the given concurrency whose handler sends
// each message's arrival on the returned channel. stop ends the Loop, then
// closes the channel and the store; cleanup calls it too.
func latencyStore(b *testing.B, concurrency int) (st *mqlite.Store, got chan arrival, stop func()) {
	b.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(b.TempDir(), "mq.db"), mqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	got = make(chan arrival, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consumer.Loop(ctx, st, "q", func(_ context.Context, m mqlite.Message) error {
			got <- arrival{seq: m.Seq, sent: time.Unix(0, int64(binary.BigEndian.Uint64(m.Body))), at: time.Now()}
			return nil
		}, consumer.LoopConfig{Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler)})
	}()
	var once sync.Once
	stopLoop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
			close(got)
			_ = st.Close()
		})
	}
	b.Cleanup(stopLoop)
	return st, got, stopLoop
}

// send sends one 256-byte message whose body starts with the time before
// its transaction began, and returns its seq.
func send(b *testing.B, st *mqlite.Store) int64 {
	body := make([]byte, 256)
	binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint64(body[8:], uint64(time.Now().UnixNano())) // a distinct content key
	res, err := outbox.Send(bctx, st, "q", outbox.Message{Body: body})
	if err != nil {
		b.Error(err)
		return 0
	}
	return res[0].Seq
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		b.Fatal("no latency measured")
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
