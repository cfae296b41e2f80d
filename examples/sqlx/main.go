// Command sqlx is mqlite's sqlx example: an order service whose orders and
// their order.placed events commit in one *sqlx.Tx on the store's own
// connection, and a consumer.Loop that handles the events idempotently.
//
//	go run ./examples/sqlx
//
// It places four orders in a fresh store (one is out of stock and leaves
// neither an order row nor an event), handles their events, prints what
// happened and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

func main() {
	os.Exit(realMain())
}

func realMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "mqlite-sqlx-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := run(ctx, os.Stdout, filepath.Join(dir, "shop.db")); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// loopOptions are the consumer options of the example: a failed handler's
// message comes back after 10 ms, then 20 ms, and so on.
var loopOptions = consumer.LoopOptions{
	Concurrency: 2,
	Backoff:     consumer.Backoff{Initial: 10 * time.Millisecond, Jitter: -1},
}

// drainTimeout bounds how long run waits for the events to be handled.
const drainTimeout = 30 * time.Second

// run is the example on a new store at path, writing to w.
func run(ctx context.Context, w io.Writer, path string) (err error) {
	st, err := mqlite.Open(ctx, path, mqlite.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	svc, err := NewService(ctx, st, w)
	if err != nil {
		return err
	}
	for item, n := range map[string]int{"book": 5, "lamp": 2, "piano": 0, "tea": 10} {
		if err := svc.Restock(ctx, item, n); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "placing orders (order row + order.placed event in one *sqlx.Tx):")
	placed := 0
	for _, o := range []struct {
		item     string
		quantity int
		cents    int64
	}{{"book", 1, 1299}, {"lamp", 2, 9000}, {"piano", 1, 250000}, {"tea", 3, 2400}} {
		order, err := svc.PlaceOrder(ctx, o.item, o.quantity, o.cents)
		switch {
		case errors.Is(err, ErrOutOfStock):
			fmt.Fprintf(w, "  %v: rolled back\n", err)
		case err != nil:
			return err
		default:
			placed++
			fmt.Fprintf(w, "  order %d: %d %s, event order-%d sent\n", order.ID, order.Quantity, order.Item, order.ID)
		}
	}
	if err := report(ctx, w, svc); err != nil {
		return err
	}

	// The first delivery of order-3 ships, then "crashes" before its
	// acknowledgement: the redelivery finds it in processed_events.
	svc.fault = func(stage string, m mqlite.Message) error {
		if stage == stageAfterCommit && m.MessageID == "order-3" && m.DeliveryCount == 1 {
			return errors.New("simulated crash after the commit, before the ack")
		}
		return nil
	}
	fmt.Fprintf(w, "\nhandling %d events with consumer.Loop:\n", placed)
	opts := loopOptions
	opts.Logger = slog.New(slog.NewTextHandler(svc.out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // steady output
			}
			return a
		},
	}))
	if err := drain(ctx, svc, placed, opts); err != nil {
		return err
	}
	return report(ctx, w, svc)
}

// report prints how many rows each table and the queue hold.
func report(ctx context.Context, w io.Writer, svc *Service) error {
	var c struct {
		Orders    int64 `db:"orders"`
		Shipments int64 `db:"shipments"`
		Processed int64 `db:"processed"`
	}
	err := svc.db.GetContext(ctx, &c, `SELECT
		(SELECT count(*) FROM orders) AS orders,
		(SELECT count(*) FROM shipments) AS shipments,
		(SELECT count(*) FROM processed_events) AS processed`)
	if err != nil {
		return fmt.Errorf("count rows: %w", err)
	}
	qs, err := svc.st.Stats(ctx, Queue)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  now: %d orders, %d shipments, %d processed events; queue %q: %d active, %d locked, %d dead-lettered\n",
		c.Orders, c.Shipments, c.Processed, Queue, qs.Active, qs.Locked, qs.DeadLettered)
	return nil
}

// drain runs svc's consumer until n messages have been completed, then
// stops it and waits for it. It fails if that takes longer than
// drainTimeout.
func drain(ctx context.Context, svc *Service, n int, opts consumer.LoopOptions) error {
	if n == 0 {
		return nil
	}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := &completions{want: n, done: make(chan struct{})}
	opts.Observer = done
	errc := make(chan error, 1)
	go func() { errc <- svc.Consume(loopCtx, opts) }()

	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	var waitErr error
	select {
	case <-done.done:
	case err := <-errc:
		return fmt.Errorf("consumer stopped before %d completions: %w", n, err)
	case <-timer.C:
		waitErr = fmt.Errorf("only %d of %d messages completed after %s", done.count(), n, drainTimeout)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	stop()
	return errors.Join(waitErr, <-errc)
}

// completions is a consumer.Observer that closes done at the want-th
// completed message.
type completions struct {
	consumer.NopObserver
	want int
	done chan struct{}

	mu sync.Mutex
	n  int
}

// Completed counts a completion.
func (c *completions) Completed(mqlite.Message, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n++; c.n == c.want {
		close(c.done)
	}
}

func (c *completions) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
