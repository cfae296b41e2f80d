package consumer_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// openExample opens a store in a fresh folder with queues orders and
// invoices and the application's table invoices; done removes it all.
func openExample() (st *mqlite.Store, done func()) {
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	st, err = mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range []string{"orders", "invoices"} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT PRIMARY KEY, amount TEXT)`); err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.Send(ctx, st, "orders", outbox.Message{Body: []byte("order-1")}, outbox.Message{Body: []byte("order-2")}); err != nil {
		log.Fatal(err)
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }
}

// LoopTx gives each message one commit for everything it causes: the
// handler prices the order outside any transaction (slow work, another
// service), and returns the step that writes the invoice row and sends the
// invoice event, which LoopTx runs in the transaction that completes the
// order. No processed-ids table: a message whose step committed is gone.
func ExampleLoopTx() {
	st, done := openExample()
	defer done()
	ctx := context.Background()

	loopCtx, stop := context.WithCancel(ctx)
	handled := 0
	err := consumer.LoopTx(loopCtx, st, "orders", func(ctx context.Context, msg mqlite.Message) (consumer.TxStep, error) {
		order := string(msg.Body)
		amount := strings.ToUpper(order) // the slow part: before the transaction
		if handled++; handled == 2 {
			stop() // Loop drains and returns
		}
		return func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			if _, err := sqlTx.ExecContext(ctx, `INSERT INTO invoices VALUES (?, ?)`, order, amount); err != nil {
				return err
			}
			return tx.Send(ctx, "invoices", outbox.Message{Body: []byte(amount), MessageID: "invoice-" + order})
		}, nil
	}, consumer.LoopConfig{})
	fmt.Println("loop returned:", err)

	var rows int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	orders, _ := st.Peek(ctx, "orders", mqlite.PeekParams{})
	invoices, _ := st.Peek(ctx, "invoices", mqlite.PeekParams{})
	fmt.Printf("invoice rows %d, orders left %d, invoice events %d\n", rows, len(orders), len(invoices))
	// Output:
	// loop returned: <nil>
	// invoice rows 2, orders left 0, invoice events 2
}

// CompleteTx completes a delivery in the caller's own transaction: the
// invoice row and the completion commit together or not at all.
func ExampleCompleteTx() {
	st, done := openExample()
	defer done()
	ctx := context.Background()

	msgs, err := st.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 1})
	if err != nil {
		log.Fatal(err)
	}
	msg := msgs[0]
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO invoices VALUES (?, 'paid')`, string(msg.Body)); err != nil {
			return err
		}
		// ErrLockLost here (the lease lapsed): returning it rolls the row back.
		return consumer.CompleteTx(tx.Context(), tx.SQL(), msg.Lock())
	})
	fmt.Println("committed:", err)
	left, _ := st.Peek(ctx, "orders", mqlite.PeekParams{})
	fmt.Println("orders left:", len(left))
	// Output:
	// committed: <nil>
	// orders left: 1
}

// ExampleCompleteWith moves one message onward exactly once: the send and
// the completion commit together. The same call runs over the broker's
// client, where it is one commit request.
func ExampleCompleteWith() {
	st, done := openExample()
	defer done()
	ctx := context.Background()
	msgs, _ := st.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 1}) // order-1 of the two
	err := consumer.CompleteWith(ctx, st, msgs[0].Lock(), func(ctx context.Context, tx consumer.Tx) error {
		return tx.Send(ctx, "invoices", outbox.Message{Body: msgs[0].Body})
	})
	orders, _ := st.Peek(ctx, "orders", mqlite.PeekParams{})
	invoices, _ := st.Peek(ctx, "invoices", mqlite.PeekParams{})
	fmt.Printf("%v: orders left %d, invoices %d (%s)\n", err, len(orders), len(invoices), invoices[0].Body)
	// Output:
	// <nil>: orders left 1, invoices 1 (order-1)
}
