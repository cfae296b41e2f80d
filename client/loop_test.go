package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestLoopOverClient runs consumer.Loop unchanged over the client: every
// message is handled, a failing one is retried, a poisoned one is
// dead-lettered, and the completions go through CompleteBatch.
func TestLoopOverClient(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	const n = 200
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(i)), MessageID: fmt.Sprint("m", i)}
	}
	res, err := b.src.SendBatch(ctx, "q", msgs)
	must(t, err)
	if len(res) != n || res[0].Seq == 0 {
		t.Fatalf("send batch: %+v", res[:1])
	}
	var mu sync.Mutex
	handled := map[string]int{}
	done := make(chan struct{})
	handler := func(ctx context.Context, m mqlite.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.MessageID]++
		if m.MessageID == "m7" && m.DeliveryCount == 1 {
			return errors.New("transient")
		}
		if m.MessageID == "m9" {
			return consumer.Permanent(errors.New("poison"))
		}
		if len(handled) == n && handled["m7"] == 2 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}
	lctx, cancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.Loop(lctx, b.src, "q", handler, consumer.LoopConfig{
			Concurrency: 4, Backoff: consumer.Backoff{Initial: -1}})
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Loop did not handle every message")
	}
	cancel()
	must(t, <-loopErr)
	left, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("left in the queue: %v", testdb.Seqs(left))
	}
	dead, err := b.src.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(dead) != 1 || dead[0].MessageID != "m9" || dead[0].DeadLetterReason != "poison" {
		t.Fatalf("dead letters %+v", dead)
	}
}

// TestLoopOverClientWakesOnCommit: a Loop long-polling through the broker
// gets a message committed later at once, not at the end of its wait.
func TestLoopOverClientWakesOnCommit(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	url, key := serve(t, tb, broker.Config{})
	polling := make(chan struct{}, 100)
	hc := &http.Client{Transport: signalTransport{http.DefaultTransport, polling}}
	c, err := client.New(client.Config{URL: url, Key: key, Clock: tb.Clock, HTTPClient: hc})
	must(t, err)
	b := &bundle{Bundle: tb, src: c}
	got := make(chan time.Time, 1)
	lctx, cancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.Loop(lctx, b.src, "q", func(ctx context.Context, m mqlite.Message) error {
			got <- time.Now()
			return nil
		}, consumer.LoopConfig{})
	}()
	<-polling // the Loop's receive (its stream) is on its way: it finds nothing and waits
	sent := time.Now()
	b.Send(t, "q", outbox.Message{Body: []byte("wake")})
	select {
	case at := <-got:
		if d := at.Sub(sent); d > 5*time.Second {
			t.Errorf("handled %v after the commit", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the commit did not wake the Loop")
	}
	cancel()
	must(t, <-loopErr)
}

// signalTransport signals each receive or stream request it sends.
type signalTransport struct {
	next http.RoundTripper
	sent chan<- struct{}
}

func (s signalTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/receive") || strings.HasSuffix(r.URL.Path, "/stream") {
		select {
		case s.sent <- struct{}{}:
		default:
		}
	}
	return s.next.RoundTrip(r)
}

// TestLoopTxProgrammingErrorOverClient runs the README's LoopTx handler,
// whose step writes its row through consumer.SQL, over the broker, where
// the step gets consumer.ErrNoSQL after the handler's external call. A
// programming error is not retried: each message's external call happens
// once at most, its message is dead-lettered with the reason, and LoopTx
// stops with the error instead of cycling every order through its
// deliveries (before: 200 external calls for 20 orders, each dead-lettered
// only once its deliveries were spent).
func TestLoopTxProgrammingErrorOverClient(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "orders", mqlite.QueueOptions{MaxDeliveryCount: 10})
	tb.Queue(t, "shipped", mqlite.QueueOptions{})
	url, key := serve(t, tb, broker.Config{})
	c := newClient(t, url, key, tb.Clock)
	const n = 20
	for i := range n {
		_, err := c.Send(ctx, "orders", outbox.Message{Body: []byte(fmt.Sprint("order ", i)), MessageID: fmt.Sprint("o", i)})
		must(t, err)
	}
	var mu sync.Mutex
	calls := map[string]int{} // external calls per order
	bookCarrier := func(_ context.Context, m mqlite.Message) string {
		mu.Lock()
		defer mu.Unlock()
		calls[m.MessageID]++
		return "label-" + m.MessageID
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.LoopTx(lctx, c, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
			label := bookCarrier(ctx, m)
			return func(ctx context.Context, tx consumer.Tx) error {
				sqlTx, err := consumer.SQL(tx) // the *sql.Tx: embedded only
				if err != nil {
					return err
				}
				if _, err := sqlTx.ExecContext(ctx, `INSERT INTO shipments (order_msg, label) VALUES (?, ?)`, m.MessageID, label); err != nil {
					return err
				}
				return tx.Send(ctx, "shipped", outbox.Message{Body: []byte(label), MessageID: "shipped-" + m.MessageID})
			}, nil
		}, consumer.LoopConfig{Concurrency: 8, Backoff: consumer.Backoff{Initial: -1}})
	}()
	var err error
	select {
	case err = <-loopErr:
	case <-time.After(30 * time.Second):
		cancel()
		<-loopErr
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("LoopTx did not stop on consumer.ErrNoSQL: %d external calls for %d orders", total(calls), len(calls))
	}
	if !errors.Is(err, consumer.ErrNoSQL) {
		t.Fatalf("LoopTx returned %v, want consumer.ErrNoSQL", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range calls {
		if k > 1 {
			t.Errorf("order %s: %d external calls, want 1 at most", id, k)
		}
	}
	dead, err := c.PeekDeadLetters(ctx, "orders", mqlite.PeekParams{})
	must(t, err)
	if len(dead) == 0 || len(dead) != len(calls) {
		t.Fatalf("%d dead letters for %d orders handled, want one each (and at least one)", len(dead), len(calls))
	}
	for _, m := range dead {
		if !strings.Contains(m.DeadLetterReason, consumer.ErrNoSQL.Error()) || m.DeliveryCount != 1 {
			t.Fatalf("dead letter %s: reason %q after %d deliveries, want ErrNoSQL's on the first", m.MessageID, m.DeadLetterReason, m.DeliveryCount)
		}
	}
	t.Logf("%d external calls for %d orders, %d dead-lettered", total(calls), n, len(dead))
}

// total sums the counts of m.
func total(m map[string]int) int {
	s := 0
	for _, k := range m {
		s += k
	}
	return s
}
