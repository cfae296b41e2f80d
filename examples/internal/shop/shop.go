// Package shop is what the sqlx and GORM examples share: the order service's
// names and errors, the Service both implement, the demo they run and the
// consumer plumbing around it. What each example teaches (its transaction,
// the outbox call, the idempotent handler) stays in the example.
package shop

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

// Queue is the queue the order events go to.
const Queue = "orders"

// SubjectPlaced is the subject of the event of a placed order.
const SubjectPlaced = "order.placed"

// ErrOutOfStock is PlaceOrder's error when the stock cannot cover the order.
// The order row and its event, already written in the transaction, roll back
// with it.
var ErrOutOfStock = errors.New("out of stock")

// ErrUnknownItem is PlaceOrder's error for an item with no stock row.
var ErrUnknownItem = errors.New("unknown item")

// Stages at which a handler calls its FaultFunc.
const (
	// StageInTx is after the handler's effect, before its commit: a failure
	// there rolls the effect back.
	StageInTx = "in-tx"
	// StageAfterCommit is after the commit: a failure there is a handler
	// whose effect committed but whose acknowledgement was lost.
	StageAfterCommit = "after-commit"
)

// FaultFunc injects handler failures: the handler calls it at each stage and
// fails there with the error it returns.
type FaultFunc func(stage string, m mqlite.Message) error

// At calls f, if it is set, for m at stage.
func (f FaultFunc) At(stage string, m mqlite.Message) error {
	if f == nil {
		return nil
	}
	return f(stage, m)
}

// Handled prints what a handler did with m: shipped is what it did, or ""
// for an event it found handled before.
func (l *LockedWriter) Handled(m mqlite.Message, shipped string) {
	if shipped == "" {
		shipped = "already handled, nothing shipped"
	}
	l.Printf("  %s (seq %d, delivery %d): %s\n", EventID(m), m.Seq, m.DeliveryCount, shipped)
}

// Counts is how many rows the service's tables hold.
type Counts struct {
	Orders, Shipments, Processed int64
	// ShippedTwice is how many orders have more than one shipment.
	ShippedTwice int64
}

// Service is the order service of an example, whatever its ORM.
type Service interface {
	// Store is the store the service runs on.
	Store() *mqlite.Store
	// Restock sets how many of item are on hand.
	Restock(ctx context.Context, item string, onHand int) error
	// Place places an order: the order row, its order.placed event (on
	// Queue and on RelayQueue) and the stock reservation in one
	// transaction. It returns the order's id.
	Place(ctx context.Context, item string, quantity int, totalCents int64) (int64, error)
	// Consume runs the service's handler in a consumer.Loop until ctx is
	// cancelled.
	Consume(ctx context.Context, opts consumer.LoopConfig) error
	// Counts counts the rows of the service's tables.
	Counts(ctx context.Context) (Counts, error)
	// SetFault sets the handler's fault injection; nil for none.
	SetFault(FaultFunc)
}

// EventID is a message's stable id: its MessageID, or "<queue>:<seq>" for a
// message sent without one (the id the relay uses too).
func EventID(m mqlite.Message) string {
	if m.MessageID != "" {
		return m.MessageID
	}
	return fmt.Sprintf("%s:%d", m.Queue, m.Seq)
}

// LoopConfig are the consumer options of the examples: a failed handler's
// message comes back after 10 ms, then 20 ms, and so on.
func LoopConfig() consumer.LoopConfig {
	return consumer.LoopConfig{
		Concurrency: 2,
		Backoff:     consumer.Backoff{Initial: 10 * time.Millisecond, Jitter: -1},
	}
}

// DrainTimeout bounds how long Drain waits.
const DrainTimeout = 30 * time.Second

// Drain runs svc's consumer until n messages have been completed, then stops
// it and waits for it. It fails if that takes longer than DrainTimeout.
func Drain(ctx context.Context, svc Service, n int, opts consumer.LoopConfig) error {
	if n == 0 {
		return nil
	}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := &completions{want: n, done: make(chan struct{})}
	opts.Observer = done
	errc := make(chan error, 1)
	go func() { errc <- svc.Consume(loopCtx, opts) }()

	timer := time.NewTimer(DrainTimeout)
	defer timer.Stop()
	var waitErr error
	select {
	case <-done.done:
	case err := <-errc:
		return fmt.Errorf("consumer stopped before %d completions: %w", n, err)
	case <-timer.C:
		waitErr = fmt.Errorf("only %d of %d messages completed after %s", done.count(), n, DrainTimeout)
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

// LockedWriter serializes the writes of concurrent handlers to W.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

// Write writes p to W, one call at a time.
func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}

// Printf formats to W, one call at a time.
func (l *LockedWriter) Printf(format string, args ...any) {
	_, _ = fmt.Fprintf(l, format, args...)
}

// Main runs run on a store file in a fresh temporary folder, removed
// afterwards, with stdout as w and a ctx that an interrupt cancels. It
// returns the process's exit code.
func Main(name string, run func(ctx context.Context, w io.Writer, path string) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "mqlite-"+name+"-*")
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

// Demo is what `go run` of an example does, on a store it opens at path:
// it places four orders (the piano is out of stock and leaves neither row
// nor event), calls between (when not nil) with the store, handles the
// events (the first delivery of order-3 fails after its commit, and its
// redelivery finds it handled), relays them to a local webhook receiver
// that verifies their signatures, and prints what happened to w.
func Demo(ctx context.Context, w io.Writer, path string,
	newService func(ctx context.Context, st *mqlite.Store, out io.Writer) (Service, error),
	between func(ctx context.Context, w io.Writer, st *mqlite.Store) error,
) (err error) {
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	out := &LockedWriter{W: w}
	svc, err := newService(ctx, st, out)
	if err != nil {
		return err
	}
	for item, n := range map[string]int{"book": 5, "lamp": 2, "piano": 0, "tea": 10} {
		if err := svc.Restock(ctx, item, n); err != nil {
			return err
		}
	}

	out.Printf("placing orders (order row + %s event in one transaction):\n", SubjectPlaced)
	placed := 0
	for _, o := range []struct {
		item     string
		quantity int
		cents    int64
	}{{"book", 1, 1299}, {"lamp", 2, 9000}, {"piano", 1, 250000}, {"tea", 3, 2400}} {
		id, err := svc.Place(ctx, o.item, o.quantity, o.cents)
		switch {
		case errors.Is(err, ErrOutOfStock):
			out.Printf("  %v: rolled back\n", err)
		case err != nil:
			return err
		default:
			placed++
			out.Printf("  order %d: %d %s, event order-%d sent\n", id, o.quantity, o.item, id)
		}
	}
	if err := report(ctx, out, svc); err != nil {
		return err
	}
	if between != nil {
		if err := between(ctx, out, st); err != nil {
			return err
		}
	}

	// The first delivery of order-3 ships, then "crashes" before its
	// acknowledgement: the redelivery finds it in processed_events.
	svc.SetFault(func(stage string, m mqlite.Message) error {
		if stage == StageAfterCommit && m.MessageID == "order-3" && m.DeliveryCount == 1 {
			return errors.New("simulated crash after the commit, before the ack")
		}
		return nil
	})
	out.Printf("\nhandling %d events with consumer.Loop:\n", placed)
	opts := LoopConfig()
	opts.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // steady output
			}
			return a
		},
	}))
	if err := Drain(ctx, svc, placed, opts); err != nil {
		return err
	}
	if err := report(ctx, out, svc); err != nil {
		return err
	}

	// The same events go out through the relay to a webhook receiver,
	// which verifies each signature and fails each first attempt: the
	// relay retries with the same webhook-id.
	secret, err := NewSecret()
	if err != nil {
		return err
	}
	rcv, err := NewReceiver(secret, ReceiverOptions{FailFirst: true, Log: out.Printf})
	if err != nil {
		return err
	}
	defer rcv.Close()
	out.Printf("\nrelaying %d events from %q to a local webhook receiver (Standard Webhooks signatures):\n", placed, RelayQueue)
	if err := Relay(ctx, st, rcv, secret, placed, opts.Logger); err != nil {
		return err
	}
	out.Printf("  the receiver verified %d events and rejected %d requests\n", len(rcv.Seen()), rcv.Rejected())
	return report(ctx, out, svc)
}

// report prints how many rows each table and the queue hold.
func report(ctx context.Context, out *LockedWriter, svc Service) error {
	c, err := svc.Counts(ctx)
	if err != nil {
		return err
	}
	out.Printf("  now: %d orders, %d shipments, %d processed events", c.Orders, c.Shipments, c.Processed)
	for _, q := range []string{Queue, RelayQueue} {
		qs, err := svc.Store().Stats(ctx, q)
		if err != nil {
			return err
		}
		out.Printf("; queue %q: %d active, %d dead-lettered", q, qs.Active+qs.Locked+qs.Scheduled, qs.DeadLettered)
	}
	out.Printf("\n")
	return nil
}
