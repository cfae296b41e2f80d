// Command example runs a Watermill Router over an mqlite queue.
//
// Each order row and its "order placed" event commit in one transaction
// (a Publisher on the caller's transaction); an order whose transaction
// rolls back leaves neither. A Router handler ships the orders with the
// retry and poison-queue middlewares: a transient failure is retried, an
// order that always fails goes to the poison queue, whose handler reports it.
// The program exits by itself once every event is handled.
//
// Run it from the repository root with:
//
//	go -C watermill run ./example
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/mqlite/mqlite"
	mqwatermill "github.com/mqlite/mqlite/watermill"
)

const (
	placedTopic = "order.placed"
	poisonTopic = "order.poison"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run places the orders, handles their events with a Router and prints
// what happened, in a fixed order, to w.
func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "mqlite-watermill-example-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{Logger: quiet})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.DB().ExecContext(ctx,
		`CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, total_cents INTEGER NOT NULL)`); err != nil {
		return err
	}
	for _, q := range []string{placedTopic, poisonTopic} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			return err
		}
	}

	// Place the orders: each row and its event in one transaction.
	for _, o := range []struct {
		item  string
		cents int
	}{{"book", 1299}, {"lamp", 4500}, {"cursed amulet", 666}} {
		if err := placeOrder(ctx, st, o.item, o.cents, nil); err != nil {
			return err
		}
	}
	errPayment := errors.New("payment declined")
	if err := placeOrder(ctx, st, "ghost", 1, errPayment); !errors.Is(err, errPayment) {
		return fmt.Errorf("the ghost order should have rolled back, got %v", err)
	}
	var rows int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&rows); err != nil {
		return err
	}
	stats, err := st.Stats(ctx, placedTopic)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "placed: %d orders, %d events (the ghost order rolled back with its event)\n", rows, stats.Active)

	// The Router: retry three times in all, then poison.
	results, err := route(ctx, st, int(stats.Active))
	if err != nil {
		return err
	}
	slices.Sort(results)
	for _, r := range results {
		fmt.Fprintln(w, r)
	}
	left, err := st.Stats(ctx, placedTopic)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "left in %s: %d\n", placedTopic, left.Total())
	return nil
}

// placeOrder inserts an order and publishes its event in one transaction;
// fail, when set, is returned after both, so the transaction rolls back.
func placeOrder(ctx context.Context, st *mqlite.Store, item string, cents int, fail error) error {
	return st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (item, total_cents) VALUES (?, ?)`, item, cents)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		pub, err := mqwatermill.NewTxPublisher(tx.SQL(), mqwatermill.PublisherConfig{})
		if err != nil {
			return err
		}
		msg := message.NewMessage(fmt.Sprintf("order-%d-placed", id), []byte(item))
		msg.Metadata.Set("order_id", fmt.Sprint(id))
		if err := pub.Publish(placedTopic, msg); err != nil {
			return err
		}
		return fail
	})
}

// beforeAck, when set, runs after each handler returns and before the
// Router acks its message: a test widens that window with it.
var beforeAck func()

// route runs a Router until want events have ended (shipped or poisoned)
// and returns one line per event.
func route(ctx context.Context, st *mqlite.Store, want int) ([]string, error) {
	logger := watermill.NopLogger{}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	sub, err := mqwatermill.NewSubscriber(st, mqwatermill.SubscriberConfig{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	poisonPub, err := mqwatermill.NewPublisher(st, mqwatermill.PublisherConfig{})
	if err != nil {
		return nil, err
	}
	defer poisonPub.Close()
	poison, err := middleware.PoisonQueue(poisonPub, poisonTopic)
	if err != nil {
		return nil, err
	}
	if beforeAck != nil {
		router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				out, err := h(msg)
				beforeAck()
				return out, err
			}
		})
	}
	// Outermost first: the poison queue sees an error only once the
	// retries are spent.
	router.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond, Logger: logger}.Middleware)

	ended := make(chan string, want)
	var mu sync.Mutex
	attempts := map[string]int{}
	var acked []<-chan struct{} // one per event: closed once the Router acks it
	router.AddConsumerHandler("ship", placedTopic, sub, func(msg *message.Message) error {
		mu.Lock()
		attempts[msg.UUID]++
		n := attempts[msg.UUID]
		if n == 1 {
			acked = append(acked, msg.Acked())
		}
		mu.Unlock()
		switch item := string(msg.Payload); {
		case item == "cursed amulet":
			return fmt.Errorf("cannot ship a %s", item)
		case item == "lamp" && n == 1:
			return errors.New("courier busy") // transient: the retry succeeds
		default:
			ended <- fmt.Sprintf("shipped order %s (%s) after %d attempt(s)", msg.Metadata.Get("order_id"), item, n)
			return nil
		}
	})
	router.AddConsumerHandler("report-poison", poisonTopic, sub, func(msg *message.Message) error {
		ended <- fmt.Sprintf("poisoned order %s (%s): %s", msg.Metadata.Get("order_id"), msg.Payload,
			msg.Metadata.Get(middleware.ReasonForPoisonedKey))
		return nil
	})

	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()

	var results []string
	timeout := time.After(30 * time.Second)
	for len(results) < want {
		select {
		case r := <-ended:
			results = append(results, r)
		case err := <-runErr:
			return nil, fmt.Errorf("router stopped early: %w", err)
		case <-timeout:
			_ = router.Close()
			<-runErr
			return nil, fmt.Errorf("only %d of %d events handled in 30s", len(results), want)
		}
	}
	// A handler reports before the Router acks its event, and the poison
	// report can come before the poisoned event's ack: closing now would
	// give back an event whose ack is still on its way. Every event was
	// handed to "ship" before it could end, so acked holds them all.
	mu.Lock()
	pending := acked
	mu.Unlock()
	for _, a := range pending {
		select {
		case <-a:
		case err := <-runErr:
			return nil, fmt.Errorf("router stopped early: %w", err)
		case <-timeout:
			_ = router.Close()
			<-runErr
			return nil, fmt.Errorf("%d events handled but not acked in 30s", want)
		}
	}
	if err := router.Close(); err != nil {
		return nil, err
	}
	if err := <-runErr; err != nil {
		return nil, err
	}
	return results, nil
}
