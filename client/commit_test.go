package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// commitEnv is a broker over a store with queues "in" and "out", and an
// admin client over every queue.
type commitEnv struct {
	tb  *testdb.Bundle
	url string
	c   *client.Client
}

// newCommitEnv opens a commitEnv whose broker has cfg and whose requests
// pass through wrap (nil: straight).
func newCommitEnv(t *testing.T, cfg broker.Config, wrap func(h *lossy)) *commitEnv {
	t.Helper()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "in", mqlite.QueueOptions{})
	tb.Queue(t, "out", mqlite.QueueOptions{})
	e := &commitEnv{tb: tb}
	var key string
	if wrap == nil {
		e.url, key = serve(t, tb, cfg)
	} else {
		_, secret, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
		must(t, err)
		cfg.Store, cfg.Logger = tb.Store, slog.New(slog.NewTextHandler(io.Discard, nil))
		srv, err := broker.New(cfg)
		must(t, err)
		l := &lossy{next: srv.Handler(), lose: map[string]int{}, busy: map[string]int{}, seen: map[string][]string{}}
		wrap(l)
		ts := httptest.NewServer(l)
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			ts.Close()
		})
		e.url, key = ts.URL, secret
	}
	e.c = newClient(t, e.url, key, tb.Clock)
	return e
}

// take sends one message to "in" and receives it.
func (e *commitEnv) take(t *testing.T) mqlite.Message {
	t.Helper()
	_, err := e.c.Send(ctx, "in", outbox.Message{Body: []byte("x")})
	must(t, err)
	msgs, err := e.c.Receive(ctx, "in", mqlite.ReceiveOptions{Max: 1})
	must(t, err)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

// count returns how many messages of queue are not completed.
func (e *commitEnv) count(t *testing.T, queue string) int64 {
	t.Helper()
	return testdb.Int(t, e.tb.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = ? AND state <> 'completed'`, queue)
}

// TestCommitAfterLostReplyReplays: the reply of a commit that went through
// is lost; the client's retry carries the batch's idempotency key and is
// answered from the record, with the same results and nothing committed
// twice (the onward message has no MessageID to deduplicate it).
func TestCommitAfterLostReplyReplays(t *testing.T) {
	t.Parallel()
	var l *lossy
	e := newCommitEnv(t, broker.Config{}, func(h *lossy) { l = h; h.lose["/v1/commit"] = 1 })
	m := e.take(t)
	var b client.Batch
	must(t, b.Send(ctx, "out", outbox.Message{Body: m.Body}))
	must(t, b.Complete(m.Lock()))
	res, err := e.c.Commit(ctx, &b)
	must(t, err)
	if !res.Replayed || len(res.Sends) != 1 || len(res.Sends[0]) != 1 || res.Sends[0][0].Seq == 0 {
		t.Fatalf("commit after a lost reply: %+v, want the replayed result of one send", res)
	}
	l.mu.Lock()
	tries := l.seen["/v1/commit"]
	l.mu.Unlock()
	if len(tries) != 2 || tries[0] != tries[1] || !strings.Contains(tries[0], `"idempotency_key"`) {
		t.Fatalf("commit tries %q: want two identical requests with an idempotency key", tries)
	}
	again, err := e.c.Commit(ctx, &b)
	must(t, err)
	if !again.Replayed || again.Sends[0][0].Seq != res.Sends[0][0].Seq {
		t.Fatalf("the same batch again: %+v, want the replay of %+v", again, res)
	}
	if in, out := e.count(t, "in"), e.count(t, "out"); in != 0 || out != 1 {
		t.Fatalf("in holds %d, out %d: want 0 and the one moved message", in, out)
	}
	// The same locks (and so the key they derive) with other items find
	// the delivery settled, and commit nothing.
	must(t, b.Send(ctx, "out", outbox.Message{Body: []byte("more")}))
	if _, err := e.c.Commit(ctx, &b); !errors.Is(err, mqlite.ErrAlreadySettled) {
		t.Fatalf("the key with other items: %v, want ErrAlreadySettled", err)
	}
	if out := e.count(t, "out"); out != 1 {
		t.Fatalf("out holds %d after the conflict, want 1", out)
	}
}

// TestCommitRefusesBadInput: every refusal is a typed error and commits
// nothing: the delivery stays held, no onward message.
func TestCommitRefusesBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		scope keys.Scope
		batch func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch
		want  error
	}{
		{"lock lost", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			stale := m.Lock()
			stale.Token = strings.Repeat("0", len(stale.Token))
			return batchOf(t, m, stale)
		}, mqlite.ErrLockLost},
		{"lock of another queue", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			other := m.Lock()
			other.Queue = "out"
			return batchOf(t, m, other)
		}, mqlite.ErrLockLost},
		{"key without the queue sent to", keys.Scope{Role: keys.Admin, Queues: []string{"in"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			return batchOf(t, m, m.Lock())
		}, client.ErrForbidden},
		{"consumer key sending", keys.Scope{Role: keys.Consumer, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			return batchOf(t, m, m.Lock())
		}, client.ErrForbidden},
		{"producer key completing", keys.Scope{Role: keys.Producer, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			return batchOf(t, m, m.Lock())
		}, client.ErrForbidden},
		{"worker key without the queue sent to", keys.Scope{Role: keys.Worker, Queues: []string{"in"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			return batchOf(t, m, m.Lock())
		}, client.ErrForbidden},
		{"over the batch limit", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			b := batchOf(t, m, m.Lock())
			must(t, b.Send(ctx, "out", make([]outbox.Message, 4)...))
			return b
		}, client.ErrRequestTooLarge},
		{"empty", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			return new(client.Batch)
		}, client.ErrMalformed},
		{"conflicting message id", keys.Scope{Role: keys.Admin, Queues: []string{"*"}}, func(t *testing.T, e *commitEnv, m mqlite.Message) *client.Batch {
			_, err := e.c.Send(ctx, "out", outbox.Message{Body: []byte("first"), MessageID: "taken"})
			must(t, err)
			b := new(client.Batch)
			must(t, b.Send(ctx, "out", outbox.Message{Body: []byte("other"), MessageID: "taken"}))
			must(t, b.Complete(m.Lock()))
			return b
		}, mqlite.ErrDuplicateConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newCommitEnv(t, broker.Config{MaxBatch: 4}, nil)
			m := e.take(t)
			b := tc.batch(t, e, m)
			before := e.count(t, "out")
			_, secret, err := keys.Create(ctx, e.tb.Store, tc.scope)
			must(t, err)
			c := newClient(t, e.url, secret, e.tb.Clock)
			if _, err := c.Commit(ctx, b); !errors.Is(err, tc.want) {
				t.Fatalf("commit: %v, want %v", err, tc.want)
			}
			if out := e.count(t, "out"); out != before {
				t.Fatalf("out holds %d after the refusal, want %d", out, before)
			}
			must(t, e.c.Complete(ctx, m.Lock())) // still held under its token
		})
	}
}

// batchOf stages m's body onward to "out" and the completion of l.
func batchOf(t *testing.T, m mqlite.Message, l mqlite.Lock) *client.Batch {
	t.Helper()
	b := new(client.Batch)
	must(t, b.Send(ctx, "out", outbox.Message{Body: m.Body}))
	must(t, b.Complete(l))
	return b
}

// TestWorkerKeyMoves: a worker key scoped to the two queues of a pipeline
// stage receives from one, commits the completion with the onward send,
// and administers neither.
func TestWorkerKeyMoves(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, broker.Config{}, nil)
	_, secret, err := keys.Create(ctx, e.tb.Store, keys.Scope{Role: keys.Worker, Queues: []string{"in", "out"}})
	must(t, err)
	w := newClient(t, e.url, secret, e.tb.Clock)
	_, err = w.Send(ctx, "in", outbox.Message{Body: []byte("x")})
	must(t, err)
	msgs, err := w.Receive(ctx, "in", mqlite.ReceiveOptions{Max: 1})
	must(t, err)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	_, err = w.Commit(ctx, batchOf(t, msgs[0], msgs[0].Lock()))
	must(t, err)
	if in, out := e.count(t, "in"), e.count(t, "out"); in != 0 || out != 1 {
		t.Fatalf("in holds %d, out %d: want 0 and the one moved message", in, out)
	}
	if _, err := w.Purge(ctx, "out", mqlite.PurgeOptions{}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a worker key purging: %v, want ErrForbidden", err)
	}
}

// TestLoopTxOverClient runs consumer.LoopTx over the client with a handler
// written for the store: each message moves from "in" to "out" once, one
// commit request per message. The onward messages carry no MessageID, so
// nothing deduplicates them: a message moved twice would leave two
// (TestOnwardCountsSeeDuplicates is the control).
func TestLoopTxOverClient(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, broker.Config{}, nil)
	const n = 50
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(i)), MessageID: fmt.Sprint("m", i)}
	}
	_, err := e.c.SendBatch(ctx, "in", msgs)
	must(t, err)
	done := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.LoopTx(lctx, e.c, "in", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				return tx.Send(ctx, "out", outbox.Message{Body: []byte("moved-" + m.MessageID)})
			}, nil
		}, consumer.LoopConfig{Concurrency: 4, Backoff: consumer.Backoff{Initial: -1},
			Observer: &countdown{left: n, done: done}})
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("LoopTx did not move every message")
	}
	cancel()
	must(t, <-loopErr)
	if in := e.count(t, "in"); in != 0 {
		t.Fatalf("in holds %d, want 0", in)
	}
	if err := movedOnce(e.onward(t), n); err != nil {
		t.Fatal(err)
	}
}

// TestOnwardCountsSeeDuplicates is the control of TestLoopTxOverClient's
// count: a Loop that sends onward outside the completion and fails the
// first delivery of m3 after its send moves m3 twice, and the count says
// so.
func TestOnwardCountsSeeDuplicates(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, broker.Config{}, nil)
	const n = 5
	for i := range n {
		_, err := e.c.Send(ctx, "in", outbox.Message{Body: []byte(fmt.Sprint(i)), MessageID: fmt.Sprint("m", i)})
		must(t, err)
	}
	done := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.Loop(lctx, e.c, "in", func(ctx context.Context, m mqlite.Message) error {
			if _, err := e.c.Send(ctx, "out", outbox.Message{Body: []byte("moved-" + m.MessageID)}); err != nil {
				return err
			}
			if m.MessageID == "m3" && m.DeliveryCount == 1 {
				return errors.New("failed after the send")
			}
			return nil
		}, consumer.LoopConfig{Backoff: consumer.Backoff{Initial: -1}, Observer: &countdown{left: n, done: done}})
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Loop did not move every message")
	}
	cancel()
	must(t, <-loopErr)
	err := movedOnce(e.onward(t), n)
	if err == nil || !strings.Contains(err.Error(), "moved-m3") {
		t.Fatalf("the count missed m3's second onward message: %v", err)
	}
}

// onward returns how many messages of queue "out" carry each body.
func (e *commitEnv) onward(t *testing.T) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, body := range testdb.Strings(t, e.tb.Store.DB(), `SELECT CAST(body AS TEXT) FROM mqlite_messages WHERE queue = 'out'`) {
		counts[body]++
	}
	return counts
}

// movedOnce checks that counts (onward) holds one message for each of
// the n messages m0 to m(n-1), and nothing else.
func movedOnce(counts map[string]int, n int) error {
	var bad []string
	for i := range n {
		if k := counts[fmt.Sprint("moved-m", i)]; k != 1 {
			bad = append(bad, fmt.Sprintf("moved-m%d: %d", i, k))
		}
	}
	if len(counts) != n {
		bad = append(bad, fmt.Sprintf("%d distinct onward messages for %d", len(counts), n))
	}
	if len(bad) > 0 {
		return fmt.Errorf("onward messages not one per message: %s", strings.Join(bad, ", "))
	}
	return nil
}

// countdown closes done once left messages completed.
type countdown struct {
	consumer.NopObserver
	mu   sync.Mutex
	left int
	done chan struct{}
}

func (c *countdown) Completed(mqlite.Message, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left--; c.left == 0 {
		close(c.done)
	}
}

// TestCompleteWithLostReplies: every reply of the broker's commit is lost
// after the commit went through. consumer.CompleteWith over the client
// does not say ErrUnavailable (which reads as "nothing happened"): it says
// client.ErrOutcomeUnknown, and its retry with the same lock and step,
// once the replies come back, answers nil from the record: one onward
// message, not two.
func TestCompleteWithLostReplies(t *testing.T) {
	t.Parallel()
	var l *lossy
	e := newCommitEnv(t, broker.Config{}, func(h *lossy) { l = h; h.lose["/v1/commit"] = 1 << 20 })
	m := e.take(t)
	step := func(ctx context.Context, tx consumer.Tx) error {
		return tx.Send(ctx, "out", outbox.Message{Body: m.Body})
	}
	err := consumer.CompleteWith(ctx, e.c, m.Lock(), step)
	l.mu.Lock()
	tries := len(l.seen["/v1/commit"])
	l.lose["/v1/commit"] = 0
	l.mu.Unlock()
	t.Logf("%d commit tries, every reply lost: %v", tries, err)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("CompleteWith with every reply lost: %v, want ErrOutcomeUnknown", err)
	}
	if in, out := e.count(t, "in"), e.count(t, "out"); in != 0 || out != 1 {
		t.Fatalf("in holds %d, out %d after the lost replies: want the commit that went through", in, out)
	}
	if err := consumer.CompleteWith(ctx, e.c, m.Lock(), step); err != nil {
		t.Fatalf("CompleteWith again after ErrOutcomeUnknown: %v, want nil from the record", err)
	}
	if out := e.count(t, "out"); out != 1 {
		t.Fatalf("out holds %d after the retry, want 1", out)
	}
}

// TestCommitOutcomeKnown: a commit refused at once, or whose broker was
// never reached, is a plain error (nothing committed), not
// ErrOutcomeUnknown.
func TestCommitOutcomeKnown(t *testing.T) {
	t.Parallel()
	e := newCommitEnv(t, broker.Config{}, nil)
	m := e.take(t)
	stale := m.Lock()
	stale.Token = strings.Repeat("0", len(stale.Token))
	if _, err := e.c.Commit(ctx, batchOf(t, m, stale)); !errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a stale token: %v, want ErrLockLost alone", err)
	}
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close() // nothing listens there
	c := newClient(t, url, "k", e.tb.Clock)
	if _, err := c.Commit(ctx, batchOf(t, m, m.Lock())); !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a broker never reached: %v, want ErrUnavailable alone", err)
	}
}
