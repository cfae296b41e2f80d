package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// Example sends through a broker and receives and completes over the
// network. The broker runs on an httptest server here; in production it is
// `mqlite serve`.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "mqlite-example")
	defer os.RemoveAll(dir)
	st, _ := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	_ = st.CreateQueue(ctx, "orders", mqlite.QueueOptions{})
	_, key, _ := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	srv, _ := broker.New(broker.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	defer srv.Shutdown(ctx) // drains, then closes the store

	c, err := client.New(client.Config{URL: ts.URL, Key: key})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	res, _ := c.Send(ctx, "orders", outbox.Message{Body: []byte(`{"id":1}`), MessageID: "order-1"})
	fmt.Println("sent seq", res.Seq)
	msgs, _ := c.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 10})
	for _, m := range msgs {
		fmt.Printf("got %s (delivery %d)\n", m.Body, m.DeliveryCount)
		if err := c.Complete(ctx, m.Lock()); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// sent seq 1
	// got {"id":1} (delivery 1)
}

// ExampleClient_Commit moves a message from one queue to another over the
// broker: the onward send and the completion commit in one transaction on
// the broker, or neither does. Committing the same Batch again (a retry
// after a lost reply) is answered from the first commit.
func ExampleClient_Commit() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "mqlite-example")
	defer os.RemoveAll(dir)
	st, _ := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	_ = st.CreateQueue(ctx, "orders", mqlite.QueueOptions{})
	_ = st.CreateQueue(ctx, "invoices", mqlite.QueueOptions{})
	_, key, _ := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{"orders", "invoices"}})
	srv, _ := broker.New(broker.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	defer srv.Shutdown(ctx)

	c, err := client.New(client.Config{URL: ts.URL, Key: key})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, _ = c.Send(ctx, "orders", outbox.Message{Body: []byte(`{"id":1}`)})
	msgs, _ := c.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 1})
	var b client.Batch
	if err := b.Send(ctx, "invoices", outbox.Message{Body: []byte(`{"order":1}`)}); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Complete(msgs[0].Lock()); err != nil {
		fmt.Println(err)
		return
	}
	res, err := c.Commit(ctx, &b)
	fmt.Println("invoice seq", res.Sends[0][0].Seq, err)
	again, err := c.Commit(ctx, &b)
	fmt.Println("again: replayed", again.Replayed, "seq", again.Sends[0][0].Seq, err)
	// Output:
	// invoice seq 2 <nil>
	// again: replayed true seq 2 <nil>
}
