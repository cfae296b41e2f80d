package watermill_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	mqwatermill "github.com/mqlite/mqlite/watermill"
)

// An event published in the same transaction as the row that caused it, and
// consumed by a subscription.
func ExampleNewTxPublisher() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example-*")
	defer os.RemoveAll(dir)
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_ = st.CreateQueue(ctx, "orders", mqlite.QueueOptions{})
	_, _ = st.DB().ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)`)

	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (item) VALUES ('book')`); err != nil {
			return err
		}
		pub, err := mqwatermill.NewTxPublisher(tx.SQL(), mqwatermill.PublisherConfig{})
		if err != nil {
			return err
		}
		return pub.Publish("orders", message.NewMessage("order-1-placed", []byte(`{"item":"book"}`)))
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	sub, err := mqwatermill.NewSubscriber(st, mqwatermill.SubscriberConfig{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	msg := <-msgs
	fmt.Println(msg.UUID, string(msg.Payload))
	msg.Ack()
	// Output: order-1-placed {"item":"book"}
}
