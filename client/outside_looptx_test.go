package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// An outsider's view of LoopTx over the client with the README's handler,
// whose step asks for SQL: a programming error that LoopTx must stop on
// at once, never repeating the handler's external call, dead-lettering the
// message with the reason, and returning an error matching ErrNoSQL.
func TestOutsideLoopTxNoSQLStops(t *testing.T) {
	for _, conc := range []int{1, 4} {
		for _, wrap := range []bool{false, true} {
			t.Run(fmt.Sprintf("concurrency=%d/wrapped=%v", conc, wrap), func(t *testing.T) {
				t.Parallel()
				b := testdb.OpenQueue(t, "orders", mqlite.QueueOptions{})
				b.Queue(t, "shipped", mqlite.QueueOptions{})
				url, key := serve(t, b, broker.Config{})
				c := newClient(t, url, key, b.Clock)
				for i := range 20 {
					if _, err := outbox.Send(ctx, b.Store, "orders", outbox.Message{Body: []byte(fmt.Sprint("order-", i)), MessageID: fmt.Sprint("order-", i)}); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				calls := map[string]int{} // external calls per message id
				var log strings.Builder
				var logMu sync.Mutex
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				err := consumer.LoopTx(cctx, c, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
					mu.Lock()
					calls[m.MessageID]++
					mu.Unlock()
					return func(ctx context.Context, tx consumer.Tx) error {
						sqlTx, err := consumer.SQL(tx)
						if err != nil {
							if wrap {
								return fmt.Errorf("shipments: %w", err)
							}
							return err
						}
						_, err = sqlTx.ExecContext(ctx, `SELECT 1`)
						return err
					}, nil
				}, consumer.LoopConfig{Concurrency: conc, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &log}, nil))})
				if !errors.Is(err, consumer.ErrNoSQL) {
					t.Fatalf("LoopTx: %v, want ErrNoSQL", err)
				}
				if cctx.Err() != nil {
					t.Fatalf("LoopTx returned only when its ctx ended: %v", err)
				}
				mu.Lock()
				total := 0
				for id, n := range calls {
					if n != 1 {
						t.Errorf("%s: %d external calls, want 1", id, n)
					}
					total += n
				}
				mu.Unlock()
				t.Logf("external calls: %d", total)
				if total > conc+conc { // running handlers and the prefetched ones
					t.Errorf("%d external calls before LoopTx stopped, want at most %d", total, 2*conc)
				}
				dead, err := b.Store.PeekDeadLetters(ctx, "orders", mqlite.PeekParams{Max: 100})
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) == 0 {
					t.Fatalf("no dead letter: the message whose step failed was not dead-lettered")
				}
				for _, d := range dead {
					if !strings.Contains(d.DeadLetterReason+" "+d.DeadLetterDescription, "SQL") {
						t.Errorf("dead letter %s: reason %q, description %q: no mention of SQL", d.MessageID, d.DeadLetterReason, d.DeadLetterDescription)
					}
				}
				if len(dead) != total {
					t.Errorf("%d dead letters for %d handlers run, want one each", len(dead), total)
				}
				s, err := b.Store.Stats(ctx, "shipped")
				if err != nil {
					t.Fatal(err)
				}
				if s.Active != 0 {
					t.Errorf("%d shipped messages, want 0", s.Active)
				}
				logMu.Lock()
				if !strings.Contains(log.String(), "SQL") {
					t.Errorf("the log does not say why LoopTx stopped:\n%s", log.String())
				}
				logMu.Unlock()
			})
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// everyOther loses the reply of every other commit request, after the
// broker handled it.
type everyOther struct {
	next    http.RoundTripper
	n       atomic.Int64
	dropped atomic.Int64
}

func (e *everyOther) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := e.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/v1/commit") || e.n.Add(1)%2 == 0 {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	e.dropped.Add(1)
	return nil, errors.New("test: connection reset after the broker answered")
}

type completions struct {
	consumer.NopObserver
	n, failed atomic.Int64
	all       chan struct{}
	want      int64
}

func (c *completions) Completed(mqlite.Message, time.Duration) {
	if c.n.Add(1) == c.want {
		close(c.all)
	}
}

func (c *completions) SettleFailed(mqlite.Message, error) { c.failed.Add(1) }

// LoopTx over a client that loses every other commit reply moves each
// message once: its onward messages carry no MessageID, so a duplicate
// would show.
func TestOutsideLoopTxLostRepliesOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	b := testdb.OpenQueue(t, "orders", mqlite.QueueOptions{})
	b.Queue(t, "shipped", mqlite.QueueOptions{})
	url, key := serve(t, b, broker.Config{})
	tr := &everyOther{next: http.DefaultTransport}
	c, err := client.New(client.Config{URL: url, Key: key, Clock: b.Clock, MaxElapsed: 10 * time.Second,
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for i := range n {
		if _, err := outbox.Send(ctx, b.Store, "orders", outbox.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	obs := &completions{all: make(chan struct{}), want: n}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- consumer.LoopTx(lctx, c, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				return tx.Send(ctx, "shipped", outbox.Message{Body: m.Body})
			}, nil
		}, consumer.LoopConfig{Concurrency: 4, Observer: obs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	select {
	case <-obs.all:
	case err := <-done:
		t.Fatalf("LoopTx returned early: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d completed in a minute (%d settlements failed)", obs.n.Load(), n, obs.failed.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("LoopTx: %v", err)
	}
	t.Logf("commit replies lost: %d; settlements failed: %d", tr.dropped.Load(), obs.failed.Load())
	if tr.dropped.Load() == 0 {
		t.Fatal("no reply was lost: the test exercised nothing")
	}
	s, err := b.Store.Stats(ctx, "shipped")
	if err != nil {
		t.Fatal(err)
	}
	if s.Active != n {
		t.Fatalf("shipped holds %d messages for %d orders, want one each", s.Active, n)
	}
}
