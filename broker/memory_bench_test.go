package broker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// The broker's memory and its stalls, the old bounds against the new in
// one run (docs/benchmark.md, "Broker memory"). "old" runs the same code
// with the bounds the broker had before: no read-ahead bound, no answer
// budget (MaxAnswerBytes -1), 64 lines of MaxBatch per stream commit.

// heapMiB returns the live heap after a collection, and the process's
// resident set, in MiB.
func heapMiB() (heap, rss float64) {
	debug.FreeOSMemory() // a collection, and the freed pages back to the OS
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = float64(ms.HeapAlloc) / (1 << 20)
	data, _ := os.ReadFile("/proc/self/status")
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			rss = kb / 1024
		}
	}
	return heap, rss
}

// settled waits until n stops changing for polls polls of 20ms (a
// benchmark's wait, not a test's).
func settled(n func() int64, polls int) {
	last, same := n(), 0
	for same < polls {
		time.Sleep(20 * time.Millisecond)
		if v := n(); v == last {
			same++
		} else {
			last, same = v, 0
		}
	}
}

func benchServer(b *testing.B, cfg Config) (*Server, *mqlite.Store) {
	tb := testdb.Open(b, mqlite.Config{})
	for _, q := range []string{"q", "other"} {
		tb.Queue(b, q, mqlite.QueueOptions{})
	}
	cfg.Store, cfg.Logger = tb.Store, slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv, tb.Store
}

// BenchmarkBrokerMemory: the heap and RSS the broker grows by with 12
// streams whose clients write lines of 256 KiB without end and read no
// answer, and with 240 peeks of a full answer (4 MiB) that no client reads.
func BenchmarkBrokerMemory(b *testing.B) {
	for _, old := range []bool{false, true} {
		name := map[bool]string{true: "old", false: "new"}[old]
		b.Run("streams-not-reading/"+name, func(b *testing.B) {
			for range b.N {
				benchStreamsNotReading(b, old)
			}
		})
		b.Run("unread-peeks/"+name, func(b *testing.B) {
			for range b.N {
				benchUnreadPeeks(b, old)
			}
		})
	}
}

func benchStreamsNotReading(b *testing.B, old bool) {
	const streams = 12
	srv, _ := benchServer(b, Config{MaxWait: time.Hour})
	var l wire.StreamSettle
	l.Reject = []wire.RejectRequest{{Seq: 1, Token: strings.Repeat("a", 32), Reason: strings.Repeat("r", 256<<10)}}
	line, _ := json.Marshal(l)
	line = append(line, '\n')
	heap0, rss0 := heapMiB()
	release := make(chan struct{})
	var read atomic.Int64
	var wg sync.WaitGroup
	bodies := make([]*io.PipeWriter, streams)
	for i := range bodies {
		pr, pw := io.Pipe()
		bodies[i] = pw
		ahead := newByteBudget(maxReadAhead)
		if old {
			ahead = newByteBudget(math.MaxInt)
		}
		st := &streamer{s: srv, q: "q", window: 1, budget: 4 << 20, inflight: map[int64]string{}, ahead: ahead}
		r := httptest.NewRequest(http.MethodPost, "/v1/queues/q/stream", countingReader{pr, &read})
		w := &stuckWriter{lineWriter: lineWriter{header: http.Header{}}, release: release}
		wg.Go(func() {
			defer func() { _ = recover() }() // the cut lines end it with http.ErrAbortHandler
			st.serve(context.Background(), w, r)
		})
		wg.Go(func() {
			for {
				if _, err := pw.Write(line); err != nil {
					return
				}
			}
		})
	}
	settled(read.Load, 25)
	heap1, rss1 := heapMiB()
	b.ReportMetric(heap1-heap0, "heap-MiB")
	b.ReportMetric(rss1-rss0, "rss-MiB")
	b.ReportMetric(float64(read.Load())/(1<<20), "read-MiB")
	close(release)
	for _, pw := range bodies {
		_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
}

func benchUnreadPeeks(b *testing.B, old bool) {
	const peeks = 240
	cfg := Config{}
	if old {
		cfg.MaxAnswerBytes = -1
	}
	srv, st := benchServer(b, cfg)
	body := []byte(strings.Repeat("b", 64<<10))
	for range 80 { // 5 MiB: every peek's answer fills its 4 MiB budget
		if _, err := outbox.Send(context.Background(), st, "q", outbox.Message{Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	_, secret, err := keys.Create(context.Background(), st, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	if err != nil {
		b.Fatal(err)
	}
	heap0, rss0 := heapMiB()
	release := make(chan struct{})
	var wg sync.WaitGroup
	writers := make([]*stuckWriter, peeks)
	for i := range writers {
		w := &stuckWriter{lineWriter: lineWriter{header: http.Header{}}, release: release}
		writers[i] = w
		r := httptest.NewRequest(http.MethodGet, "/v1/queues/q/messages?max=1000", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		wg.Go(func() { srv.Handler().ServeHTTP(w, r) })
	}
	written := func() int64 {
		var n int64
		for _, w := range writers {
			n += w.entered.Load()
		}
		return n
	}
	settled(written, 150)
	heap1, rss1 := heapMiB()
	b.ReportMetric(heap1-heap0, "heap-MiB")
	b.ReportMetric(rss1-rss0, "rss-MiB")
	b.ReportMetric(float64(written()), "answers-written")
	close(release)
	wg.Wait()
}

// BenchmarkStreamCommitStall: the longest send of another tenant while a
// stream commits 64 lines of 1000 completions that came together (every
// one a live lock): one transaction of 64,000 (old) against 64 of 1000.
func BenchmarkStreamCommitStall(b *testing.B) {
	for _, old := range []bool{false, true} {
		b.Run(map[bool]string{true: "old", false: "new"}[old], func(b *testing.B) {
			for range b.N {
				benchCommitStall(b, old)
			}
		})
	}
}

func benchCommitStall(b *testing.B, old bool) {
	const lines, perLine = 64, 1000
	ctx := context.Background()
	srv, st := benchServer(b, Config{})
	msgs := make([]outbox.Message, perLine)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte("m")}
	}
	in := make(chan inLine, lines)
	for range lines {
		if _, err := outbox.Send(ctx, st, "q", msgs...); err != nil {
			b.Fatal(err)
		}
		got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: perLine})
		if err != nil || len(got) != perLine {
			b.Fatalf("receive: %d, %v", len(got), err)
		}
		var l wire.StreamSettle
		for _, m := range got {
			l.Complete = append(l.Complete, wire.LockRequest{Seq: m.Seq, Token: m.LockToken})
		}
		in <- inLine{v: l}
	}
	close(in)
	ended := make(chan struct{})
	close(ended)
	w := &lineWriter{header: http.Header{}}
	// A full window of another delivery: the commits claim nothing.
	s := &streamer{s: srv, q: "q", window: 1, budget: 4 << 20, inflight: map[int64]string{-1: ""},
		ahead: newByteBudget(maxReadAhead), w: w, rc: http.NewResponseController(w)}
	if old {
		s.maxSettles = lines * perLine
	}
	stop := make(chan struct{})
	var worst time.Duration
	var sends int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if _, err := outbox.Send(ctx, st, "other", outbox.Message{Body: []byte("x")}); err != nil {
				b.Error(err)
				return
			}
			worst, sends = max(worst, time.Since(start)), sends+1
		}
	})
	start := time.Now()
	if err := s.run(ctx, in, make(chan struct{}), ended); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-send-ms")
	b.ReportMetric(float64(took.Milliseconds()), "commit-ms")
	b.ReportMetric(float64(sends), "sends")
	if evs := strings.Count(w.buf.String(), "\n"); evs != lines {
		b.Fatalf("%d answers, want %d", evs, lines)
	}
}
