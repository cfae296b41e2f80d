package consumer_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// Loop consumes what outbox.SendOne committed, one handler call per
// message, and stops when its ctx is cancelled.
func ExampleLoop() {
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil {
		log.Fatal(err)
	}

	// The messages commit with the caller's transaction (business rows
	// would go in the same one).
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, order := range []string{"order-1", "order-2", "order-3"} {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{Body: []byte(order)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	loopCtx, stop := context.WithCancel(ctx)
	handled := 0
	err = consumer.Loop(loopCtx, st, "orders", func(ctx context.Context, msg mqlite.Message) error {
		fmt.Printf("handling %s (delivery %d)\n", msg.Body, msg.DeliveryCount)
		if handled++; handled == 3 {
			stop() // Loop drains and returns
		}
		return nil // completes the message
	}, consumer.LoopConfig{Concurrency: 1})
	fmt.Println("loop returned:", err)

	left, err := st.Peek(ctx, "orders", mqlite.PeekParams{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left in the queue:", len(left))
	// Output:
	// handling order-1 (delivery 1)
	// handling order-2 (delivery 1)
	// handling order-3 (delivery 1)
	// loop returned: <nil>
	// left in the queue: 0
}
