package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The streamer's tests run in a synctest bubble: the wall clock, Receive's
// long-poll timer (Config.MaxWait) included, is fake and moves only when
// every goroutine of the test waits, so a stream that waits for its
// long-poll to run out shows as fake time passing, not as a slow test.

// hookClock is the store's clock in a bubble: the bubble's time, and a
// hook that runs once, inside the next call of Now (the store reads its
// clock inside the claim's transaction).
type hookClock struct {
	mu   sync.Mutex
	hook func()
}

func (c *hookClock) Now() time.Time {
	c.mu.Lock()
	h := c.hook
	c.hook = nil
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return time.Now()
}

func (c *hookClock) set(h func()) {
	c.mu.Lock()
	c.hook = h
	c.mu.Unlock()
}

// lineWriter is the answer of a stream: it keeps the lines written, and
// flushes as a no-op. The ResponseController's deadlines and full duplex
// are not supported, which the streamer ignores.
type lineWriter struct {
	mu     sync.Mutex
	header http.Header
	buf    bytes.Buffer
}

func (w *lineWriter) Header() http.Header { return w.header }
func (w *lineWriter) WriteHeader(int)     {}
func (w *lineWriter) Flush()              {}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// events decodes the lines written so far.
func (w *lineWriter) events(t *testing.T) []wire.StreamEvent {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wire.StreamEvent
	for line := range bytes.Lines(w.buf.Bytes()) {
		var ev wire.StreamEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// streamBundle is a stream served in a bubble: the store, its clock, the
// client's end of the request body, and the answer.
type streamBundle struct {
	st    *mqlite.Store
	srv   *Server
	clock *hookClock
	body  *io.PipeWriter
	w     *lineWriter
	done  chan struct{} // closed when the stream's handler returned
}

// openStream serves a stream of queue "q" with window on a fresh store,
// inside the current bubble, with a broker whose long-polls last an hour.
func openStream(t *testing.T, window int, send ...outbox.Message) *streamBundle {
	t.Helper()
	return openStreamWith(t, streamSetup{window: window, send: send})
}

// streamSetup is what openStreamWith serves.
type streamSetup struct {
	window int
	send   []outbox.Message
	cfg    Config                    // the broker's; Store, MaxWait and Logger are set
	tracer trace.TracerProvider      // the store's, when not nil
	w      http.ResponseWriter       // the answer's writer, when not b.w
	body   func(io.Reader) io.Reader // wraps the request body, when not nil
	budget int64                     // the max_bytes the client asks, when not 0
}

// openStreamWith is openStream with more to set.
func openStreamWith(t *testing.T, su streamSetup) *streamBundle {
	t.Helper()
	window, send := su.window, su.send
	clock := &hookClock{}
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{Clock: clock,
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
		TracerProvider: su.tracer})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(send) > 0 {
		if _, err := outbox.Send(context.Background(), st, "q", send...); err != nil {
			t.Fatal(err)
		}
	}
	cfg := su.cfg
	cfg.Store, cfg.MaxWait, cfg.Logger = st, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	budget, err := srv.budget(su.budget)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	b := &streamBundle{st: st, srv: srv, clock: clock, body: pw, w: &lineWriter{header: http.Header{}}, done: make(chan struct{})}
	var body io.Reader = pr
	if su.body != nil {
		body = su.body(pr)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/queues/q/stream", body)
	s := &streamer{s: srv, q: "q", window: window, budget: budget, inflight: map[int64]string{}, ahead: newByteBudget(maxReadAhead)}
	var w http.ResponseWriter = b.w
	if su.w != nil {
		w = su.w
	}
	go func() {
		defer close(b.done)
		s.serve(context.Background(), w, r)
	}()
	t.Cleanup(func() {
		_ = pw.Close()
		<-b.done
		_ = st.Close()
	})
	return b
}

// line writes one client line on the stream.
func (b *streamBundle) line(t *testing.T, l wire.StreamSettle) {
	t.Helper()
	data, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.body.Write(append(data, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestStreamLineDuringClaim: a client line that comes while the stream's
// wait is claiming does not undo the claim. The wait wakes at a scheduled
// message's due moment, and the client's completion of the first message
// reaches the stream inside that claim's transaction: the claim commits
// and its message goes out, before the answer to the line. (A line used to
// cancel the wait's Receive, whose claim then rolled back: the message
// went out only with the next commit, after the answer.)
func TestStreamLineDuringClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := openStream(t, 2, outbox.Message{Body: []byte("a")},
			outbox.Message{Body: []byte("b"), DeliverAt: time.Now().Add(time.Second)})
		synctest.Wait() // a went out; the stream sleeps until b is due
		evs := b.w.events(t)
		if len(evs) != 1 || len(evs[0].Messages) != 1 {
			t.Fatalf("before b is due: %+v, want a alone", evs)
		}
		a := evs[0].Messages[0]
		hooked := make(chan struct{})
		b.clock.set(func() { // inside the claim of b
			defer close(hooked)
			b.line(t, wire.StreamSettle{Complete: []wire.LockRequest{{Seq: a.Seq, Token: a.LockToken}}})
			synctest.Wait() // the stream has read the line and acted on it
		})
		time.Sleep(time.Second) // b falls due
		<-hooked
		synctest.Wait()
		evs = b.w.events(t)
		if len(evs) != 3 {
			t.Fatalf("events %+v, want a, b and the answer to line 1", evs)
		}
		if len(evs[1].Messages) != 1 || evs[1].Messages[0].Seq != a.Seq+1 || evs[1].Messages[0].DeliveryCount != 1 {
			t.Fatalf("second event %+v, want b (its first delivery) from the claim the line came in", evs[1])
		}
		if evs[2].Line != 1 || len(evs[2].Results) != 1 || evs[2].Results[0].Error != nil {
			t.Fatalf("third event %+v, want line 1 answered without error", evs[2])
		}
	})
}

// TestStreamEndDuringWait: a client that ends its lines while the stream
// long-polls ends the stream at once, not when Config.MaxWait (an hour
// here) runs out: the end of the lines interrupts the wait. Client.Stream's
// Close waits for this end.
func TestStreamEndDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := openStream(t, 1)
		synctest.Wait() // the stream long-polls an empty queue
		start := time.Now()
		if err := b.body.Close(); err != nil {
			t.Fatal(err)
		}
		<-b.done
		if took := time.Since(start); took != 0 {
			t.Fatalf("the stream ended %v after the end of its lines, want at once", took)
		}
		if evs := b.w.events(t); len(evs) != 0 {
			t.Fatalf("events %+v, want none", evs)
		}
	})
}

// TestStreamHoldsLineWhileWaiting: a line that comes while the stream
// waits for a message is answered settleHold later when no message comes
// (not when the long-poll ends), and a message that becomes claimable
// within that time goes out before the answer.
func TestStreamHoldsLineWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := openStream(t, 3, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b")})
		synctest.Wait()
		evs := b.w.events(t)
		if len(evs) != 1 || len(evs[0].Messages) != 2 {
			t.Fatalf("at the open: %+v, want a and b", evs)
		}
		a, c := evs[0].Messages[0], evs[0].Messages[1]

		// No message comes: the answer comes settleHold after the line.
		start := time.Now()
		b.line(t, wire.StreamSettle{Complete: []wire.LockRequest{{Seq: a.Seq, Token: a.LockToken}}})
		synctest.Wait()
		if evs := b.w.events(t); len(evs) != 1 {
			t.Fatalf("answered before the hold ended: %+v", evs[1:])
		}
		time.Sleep(settleHold)
		synctest.Wait()
		evs = b.w.events(t)
		if len(evs) != 2 || evs[1].Line != 1 || time.Since(start) != settleHold {
			t.Fatalf("after %v: %+v, want line 1 answered after %v", time.Since(start), evs[1:], settleHold)
		}

		// A message sent while a line is held goes out first.
		b.line(t, wire.StreamSettle{Complete: []wire.LockRequest{{Seq: c.Seq, Token: c.LockToken}}})
		synctest.Wait()
		if _, err := outbox.Send(context.Background(), b.st, "q", outbox.Message{Body: []byte("d")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		evs = b.w.events(t)
		if len(evs) != 4 || len(evs[2].Messages) != 1 || string(evs[2].Messages[0].Body) != "d" || evs[3].Line != 2 {
			t.Fatalf("events %+v, want d, then the answer to line 2", evs[2:])
		}
	})
}

// TestStreamCommitIsBoundedByMaxBatch: the lines that come together commit
// together, up to Config.MaxBatch settlements: one commit of a stream
// holds the store's one writer for no more, however many lines wait. The
// store's settle spans count the completions of each transaction. Up to
// 64 lines of MaxBatch each used to commit in one transaction.
func TestStreamCommitIsBoundedByMaxBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxBatch, lines = 4, 3
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		b := openStreamWith(t, streamSetup{window: 1, cfg: Config{MaxBatch: maxBatch}, tracer: tp})
		synctest.Wait() // the stream long-polls an empty queue
		seq := int64(1)
		for range lines { // full lines of completions of no live lock
			var l wire.StreamSettle
			for range maxBatch {
				l.Complete = append(l.Complete, wire.LockRequest{Seq: seq, Token: strings.Repeat("a", 32)})
				seq++
			}
			b.line(t, l)
		}
		synctest.Wait()
		time.Sleep(settleHold) // the lines commit
		synctest.Wait()
		if evs := b.w.events(t); len(evs) != lines {
			t.Fatalf("events %+v, want the answers to %d lines", evs, lines)
		}
		var commits []int
		for _, sp := range rec.Ended() {
			for _, a := range sp.Attributes() {
				if a.Key == semconv.MessagingBatchMessageCountKey {
					commits = append(commits, int(a.Value.AsInt64()))
				}
			}
		}
		if len(commits) != lines || slices.Max(commits) > maxBatch {
			t.Fatalf("completions per transaction %v, want %d of at most %d", commits, lines, maxBatch)
		}
	})
}

// stuckWriter is the answer of a client that does not read: every write
// waits until release is closed.
type stuckWriter struct {
	lineWriter
	release chan struct{}
	entered atomic.Int64 // the writes begun
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.entered.Add(1)
	<-w.release
	return w.lineWriter.Write(p)
}

// countingReader counts the bytes the stream read of its client's lines.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestStreamReadAheadIsBounded: a client that writes lines without end
// and reads no answer gets no more of its lines read, decoded and held
// than the read-ahead bound (maxReadAhead, besides the one line being
// read): the bytes the broker read and the heap it holds stay within a
// bound derived from the limits. The reader used to read and decode up to
// 64 lines ahead of a commit that waited for its answer to be read, and
// 64 more sat in that commit: 12 streams held 2.6 GiB.
func TestStreamReadAheadIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			streams   = 4
			reasonLen = 128 << 10
			lines     = 256 // per stream: 32 MiB each, were all of it read
		)
		var l wire.StreamSettle
		l.Reject = []wire.RejectRequest{{Seq: 1, Token: strings.Repeat("a", 32), Reason: strings.Repeat("r", reasonLen)}}
		line, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		line = append(line, '\n')

		release := make(chan struct{})
		defer close(release) // runs before the streams' cleanups: they end
		bodies := make([]*io.PipeWriter, streams)
		var read atomic.Int64
		for i := range bodies {
			b := openStreamWith(t, streamSetup{window: 1,
				w:    &stuckWriter{lineWriter: lineWriter{header: http.Header{}}, release: release},
				body: func(r io.Reader) io.Reader { return countingReader{r, &read} }})
			bodies[i] = b.body
		}
		synctest.Wait() // every stream long-polls an empty queue
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)

		var writers sync.WaitGroup
		for _, body := range bodies {
			writers.Go(func() {
				for range lines {
					if _, err := body.Write(line); err != nil {
						return // the stream ended
					}
				}
			})
		}
		synctest.Wait()
		time.Sleep(settleHold) // the first lines commit; their answers wait
		synctest.Wait()        // the readers and the writers wait

		runtime.GC()
		runtime.ReadMemStats(&after)
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		// Per stream: the scanner's buffer (one line, MaxStreamLine at
		// most), the lines read ahead (maxReadAhead) and their decoded
		// copies, and the line being read.
		perStream := int64(MaxStreamLine + 2*maxReadAhead + 2*len(line))
		t.Logf("held %d KiB, read %d KiB", held>>10, read.Load()>>10)
		if bound := streams * perStream; held > bound {
			t.Errorf("the broker holds %d MiB for %d streams that do not read, want at most %d MiB",
				held>>20, streams, bound>>20)
		}
		if bound := int64(streams * (maxReadAhead + 3*len(line))); read.Load() > bound {
			t.Errorf("the broker read %d KiB of lines not answered, want at most %d KiB", read.Load()>>10, bound>>10)
		}
		for _, body := range bodies {
			_ = body.Close()
		}
		writers.Wait()
	})
}

// TestStreamHoldsAPlaceOnlyWhileItWaits: a stream holds a long-poll place
// while it waits for a message and gives it back once its window is full;
// when it waits again with no place left, it waits for one, claiming
// nothing, and takes the first given back. The stream's one place was
// held for as long as it stayed open.
func TestStreamHoldsAPlaceOnlyWhileItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := openStreamWith(t, streamSetup{window: 1, cfg: Config{MaxLongPolls: 1}})
		synctest.Wait() // the stream waits for a message: it holds the place
		if b.srv.polls.take("other") {
			t.Fatal("a place was free while the stream waited for a message")
		}
		if _, err := outbox.Send(context.Background(), b.st, "q", outbox.Message{Body: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // a went out: the window is full
		if !b.srv.polls.take("other") {
			t.Fatal("the stream holds its place while its window is full")
		}
		a := b.w.events(t)[0].Messages[0]
		b.line(t, wire.StreamSettle{Complete: []wire.LockRequest{{Seq: a.Seq, Token: a.LockToken}}})
		synctest.Wait() // line 1 answered; the stream waits for a place
		if _, err := outbox.Send(context.Background(), b.st, "q", outbox.Message{Body: []byte("c")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if evs := b.w.events(t); len(evs) != 2 || evs[1].Line != 1 {
			t.Fatalf("events %+v, want a and the answer to line 1, c not claimed without a place", evs)
		}
		b.srv.polls.give("other")
		synctest.Wait()
		if evs := b.w.events(t); len(evs) != 3 || len(evs[2].Messages) != 1 || string(evs[2].Messages[0].Body) != "c" {
			t.Fatalf("events %+v, want c once a place was given back", evs)
		}
	})
}
