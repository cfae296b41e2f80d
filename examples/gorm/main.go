// Command gorm is mqlite's GORM example, a service skeleton to copy: an
// order service whose orders and their order.placed events commit in one
// GORM transaction on the store's own *sql.DB (outbox.SendOne on the
// *sql.Tx behind it, gormtx.SQLTx), and a consumer.LoopTx that ships each
// order exactly once: the shipment row, written with GORM on the step's
// transaction, commits with the event's completion.
//
//	go run -C examples/gorm .               # from the repository root; a fresh store
//	go run -C examples/gorm . -db shop.db   # or a file of yours (reused if it exists)
//
// It places four orders (the piano is out of stock: its transaction rolls
// back and leaves neither an order row nor an event), shows that a GORM
// handle opened on the file by itself is refused (mqlite.ErrNotAStore),
// handles the events (the first delivery of order-3 fails after writing
// its shipment, inside the transaction: the row rolls back with the
// completion, and the redelivery ships it once), prints what happened and
// exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

func main() { os.Exit(exitCode()) }

// exitCode runs the example and returns the process's exit code (so that
// the deferred calls run before the exit).
func exitCode() int {
	path := flag.String("db", "", "the store file (default: a fresh one in a temporary folder, removed at exit)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *path == "" {
		dir, err := os.MkdirTemp("", "mqlite-gorm-*")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		*path = filepath.Join(dir, "shop.db")
	}
	if err := run(ctx, os.Stdout, *path); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// run is the example on the store at path, writing to w.
func run(ctx context.Context, w io.Writer, path string) (err error) {
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
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

	fmt.Fprintf(w, "placing orders (order row + %s event in one transaction):\n", SubjectPlaced)
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
			fmt.Fprintf(w, "  order %d: %d %s, event order-%d sent\n", order.ID, o.quantity, o.item, order.ID)
		}
	}

	if err := wrongHandle(ctx, w, st); err != nil {
		return err
	}

	// The first delivery of order-3 writes its shipment, then fails
	// inside the transaction: nothing of it commits, the event comes again.
	svc.InTx = func(m mqlite.Message) error {
		if m.MessageID == "order-3" && m.DeliveryCount == 1 {
			return errors.New("simulated failure")
		}
		return nil
	}
	fmt.Fprintf(w, "\nhandling %d events with consumer.LoopTx:\n", placed)
	if err := consumeUntil(ctx, svc, placed); err != nil {
		return err
	}
	c, err := svc.Counts(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "now: %d orders, %d shipments, %d events left, %d orders shipped twice\n",
		c.Orders, c.Shipments, c.Pending, c.ShippedTwice)
	return nil
}

// consumeUntil runs the service's consumer until n events were completed,
// then stops it. A service runs Consume until it shuts down instead.
func consumeUntil(ctx context.Context, svc *Service, n int) error {
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := &completions{left: n, stop: stop}
	err := svc.Consume(loopCtx, consumer.LoopConfig{
		Concurrency: 2,
		// A failed event comes back after 10 ms, then 20 ms, and so on.
		Backoff:  consumer.Backoff{Initial: 10 * time.Millisecond, Jitter: -1},
		Observer: done,
	})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return err
}

// completions is a consumer.Observer that calls stop at the last of the
// completions it waits for.
type completions struct {
	consumer.NopObserver
	mu   sync.Mutex
	left int
	stop context.CancelFunc
}

// Completed counts a completed event.
func (c *completions) Completed(mqlite.Message, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left--; c.left == 0 {
		c.stop()
	}
}

// wrongHandle shows the mistake the outbox refuses: GORM opened on the
// store's file by itself (a second sql.Open) instead of on st.DB().
func wrongHandle(ctx context.Context, w io.Writer, st *mqlite.Store) (err error) {
	wrong, err := gorm.Open(sqlite.Open(st.Path()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("open a second handle: %w", err)
	}
	sqlDB, err := wrong.DB()
	if err != nil {
		return fmt.Errorf("open a second handle: %w", err)
	}
	defer func() { err = errors.Join(err, sqlDB.Close()) }()
	_, err = placeOrder(ctx, wrong, "book", 1, 1299)
	if !errors.Is(err, mqlite.ErrNotAStore) {
		return fmt.Errorf("an order on a second handle gave %v, want mqlite.ErrNotAStore", err)
	}
	fmt.Fprintf(w, "\nthe same order through gorm.Open(sqlite.Open(path)) instead of st.DB():\n  %v\n  (rolled back: nothing written)\n", err)
	return nil
}
