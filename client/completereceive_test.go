package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestCompleteAndReceive: one request completes the locks and claims the
// next messages; a lost lock gets its own error; a retry with the same
// attempt id replays the claim and the completions answer from their
// receipts; a lock of another queue is refused and nothing is done.
func TestCompleteAndReceive(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	b.Send(t, "q", outbox.Message{}, outbox.Message{}, outbox.Message{}, outbox.Message{})
	first := b.receive(t, mqlite.ReceiveOptions{Max: 2})
	stale := first[1].Lock()
	stale.Token = strings.Repeat("0", len(stale.Token))
	locks := []mqlite.Lock{first[0].Lock(), stale}
	opts := mqlite.ReceiveOptions{Max: 2, AttemptID: "cr-1"}
	res, next, err := b.src.CompleteAndReceive(ctx, "q", locks, opts)
	must(t, err)
	if res[0] != nil || !errors.Is(res[1], mqlite.ErrLockLost) {
		t.Fatalf("results %v, want nil and ErrLockLost", res)
	}
	if got := testdb.Seqs(next); len(got) != 2 || got[0] != first[1].Seq+1 {
		t.Fatalf("claimed %v after %v", got, testdb.Seqs(first))
	}
	again, replayed, err := b.src.CompleteAndReceive(ctx, "q", locks, opts)
	must(t, err)
	if again[0] != nil || fmt.Sprint(testdb.Seqs(replayed)) != fmt.Sprint(testdb.Seqs(next)) || replayed[0].LockToken != next[0].LockToken {
		t.Fatalf("retry: results %v, claimed %v; want nil first and the same claim %v", again, testdb.Seqs(replayed), testdb.Seqs(next))
	}
	other := next[0].Lock()
	other.Queue = "elsewhere"
	if _, _, err := b.src.CompleteAndReceive(ctx, "q", []mqlite.Lock{other}, mqlite.ReceiveOptions{}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("a lock of another queue: %v, want ErrInvalidArgument", err)
	}
	if _, _, err := b.Store.CompleteAndReceive(ctx, "q", []mqlite.Lock{other}, mqlite.ReceiveOptions{}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("the store, a lock of another queue: %v, want ErrInvalidArgument", err)
	}
	st, err := b.Store.Stats(ctx, "q")
	must(t, err)
	if st.Locked != 3 { // first[1] (its real token was never used) and the two claimed
		t.Fatalf("locked %d, want 3: %+v", st.Locked, st)
	}
}

// countingTransport counts the requests by their last path segment.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// noStream is the client with its streams refused, as by a broker without
// them: Loop claims with Receive and completes with CompleteAndReceive.
type noStream struct{ *client.Client }

func (noStream) OpenStream(context.Context, string, int) (consumer.Stream, error) {
	return nil, consumer.ErrNoStream
}

// TestLoopOverClientRequests: consumer.Loop over the client, handling one
// message at a time, does not pay a receive and a complete per message:
// it streams (one request for them all), and without streams each request
// completes the last message and claims the next.
func TestLoopOverClientRequests(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		src    func(*client.Client) consumer.Store
		most   int // consume requests, for n messages
		stream bool
	}{
		{"stream", func(c *client.Client) consumer.Store { return c }, 5, true},
		{"complete-receive", func(c *client.Client) consumer.Store { return noStream{c} }, n + 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := loopRequests(t, c.src)
			total := got["receive"] + got["complete"] + got["complete-batch"] + got["complete-receive"] + got["stream"]
			if total > c.most || (got["stream"] > 0) != c.stream {
				t.Fatalf("%d consume requests for %d messages (%v), want at most %d", total, n, got, c.most)
			}
		})
	}
}

const n = 60

// loopRequests runs Loop over src (Concurrency 1, no prefetch) until it
// handled n messages and counts the requests by their last path segment.
func loopRequests(t *testing.T, src func(*client.Client) consumer.Store) map[string]int {
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	url, key := serve(t, tb, broker.Config{})
	ct := &countingTransport{next: http.DefaultTransport, n: map[string]int{}}
	c, err := client.New(client.Config{URL: url, Key: key, Clock: tb.Clock, HTTPClient: &http.Client{Transport: ct}})
	must(t, err)
	defer c.Close()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(i))}
	}
	_, err = c.SendBatch(ctx, "q", msgs)
	must(t, err)
	var handled atomic.Int64
	done := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.Loop(lctx, src(c), "q", func(ctx context.Context, m mqlite.Message) error {
			if handled.Add(1) == n {
				close(done)
			}
			return nil
		}, consumer.LoopConfig{Concurrency: 1, Prefetch: -1})
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	cancel()
	must(t, <-loopErr)
	st, err := tb.Store.Stats(ctx, "q")
	must(t, err)
	if st.Active+st.Locked != 0 {
		t.Fatalf("left: %+v", st)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return maps.Clone(ct.n)
}
