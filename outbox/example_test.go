package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// openExample opens a store with a queue "orders" and a business table
// orders in a temporary folder; the returned func closes and removes it.
func openExample(ctx context.Context) (*mqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx,
		`CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	return st, func() {
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// The order row and its event commit together, or neither does.
func ExampleSendOne() {
	ctx := context.Background()
	st, done := openExample(ctx)
	defer done()

	var orderID, seq int64
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (item) VALUES (?)`, "book")
		if err != nil {
			return err
		}
		if orderID, err = res.LastInsertId(); err != nil {
			return err
		}
		seq, err = outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{
			Body:      fmt.Appendf(nil, `{"order_id":%d,"item":"book"}`, orderID),
			MessageID: fmt.Sprintf("order-%d", orderID),
			Subject:   "order.placed",
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %d committed with event seq %d\n", orderID, seq)
	// Output: order 1 committed with event seq 1
}

// A batch goes on slot by slot: a resend inside the dedup window returns the
// original seq, and the same MessageID with another body fails alone.
func ExampleSendBatch() {
	ctx := context.Background()
	st, done := openExample(ctx)
	defer done()

	first := outbox.Message{Body: []byte(`{"order_id":1}`), MessageID: "order-1"}
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", first)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		results, err := outbox.SendBatch(tx.Context(), tx.SQL(), "orders", []outbox.Message{
			{Body: []byte(`{"order_id":2}`), MessageID: "order-2"},
			first, // a resend
			{Body: []byte(`{"order_id":1,"changed":true}`), MessageID: "order-1"},
		})
		if err != nil {
			return err
		}
		for i, r := range results {
			switch {
			case errors.Is(r.Err, mqlite.ErrDuplicateConflict):
				fmt.Printf("slot %d: conflict, not sent\n", i)
			case r.Duplicate:
				fmt.Printf("slot %d: duplicate of seq %d\n", i, r.Seq)
			default:
				fmt.Printf("slot %d: seq %d\n", i, r.Seq)
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// slot 0: seq 2
	// slot 1: duplicate of seq 1
	// slot 2: conflict, not sent
}
