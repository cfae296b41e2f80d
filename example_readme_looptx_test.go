package mqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// Example_loopTx is the README's LoopTx example: the shipment row, the
// shipped event and the order's completion commit in one transaction.
// TestREADMELoopTx keeps the README's copy equal to shipOrders' lines
// between the README-looptx markers.
func Example_loopTx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mqlite-readme")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")
	if err := placeOrder(ctx, path); err != nil {
		log.Fatal(err)
	}
	if err := shipOrders(ctx, path); err != nil {
		log.Fatal(err)
	}
	// Output:
	// orders: 1, messages: 1: {"order_id":1}
	// shipments: 1, orders left: 0, shipped events: 1
}

// shipOrders consumes the orders placeOrder sent with the README's LoopTx
// handler until one was shipped.
func shipOrders(ctx context.Context, path string) error {
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE shipments (
		order_msg TEXT PRIMARY KEY, label TEXT NOT NULL)`); err != nil {
		return err
	}
	if err := st.CreateQueue(ctx, "shipped", mqlite.QueueOptions{}); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	bookCarrier := func(_ context.Context, body []byte) (string, error) {
		stop() // one order: Loop drains and returns
		return "label-" + string(body), nil
	}

	// README-looptx:begin
	err = consumer.LoopTx(ctx, st, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
		label, err := bookCarrier(ctx, m.Body) // slow external work: before the transaction
		if err != nil {
			return nil, err // Abandon with backoff
		}
		// The step runs in the transaction that completes m: the row, the
		// onward message and the completion commit together, or none does.
		return func(ctx context.Context, tx consumer.Tx) error {
			_, err := tx.SQL().ExecContext(ctx,
				`INSERT INTO shipments (order_msg, label) VALUES (?, ?)`, m.MessageID, label)
			if err != nil {
				return err
			}
			_, err = tx.Send(ctx, "shipped", outbox.Message{Body: []byte(label), MessageID: "shipped-" + m.MessageID})
			return err
		}, nil
	}, consumer.LoopConfig{Concurrency: 8})
	// README-looptx:end
	if err != nil {
		return err
	}
	var shipments int
	if err := st.DB().QueryRowContext(context.WithoutCancel(ctx), `SELECT count(*) FROM shipments`).Scan(&shipments); err != nil {
		return err
	}
	left, err := st.Peek(context.WithoutCancel(ctx), "orders", mqlite.PeekParams{})
	if err != nil {
		return err
	}
	shipped, err := st.Peek(context.WithoutCancel(ctx), "shipped", mqlite.PeekParams{})
	if err != nil {
		return err
	}
	fmt.Printf("shipments: %d, orders left: %d, shipped events: %d\n", shipments, len(left), len(shipped))
	return nil
}

// TestREADMELoopTx: the README's LoopTx block is shipOrders' lines between
// the README-looptx markers.
func TestREADMELoopTx(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_readme_looptx_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "\t// README-looptx:begin\n")
	body, _, _ = strings.Cut(body, "\t// README-looptx:end\n")
	var want strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+want.String()+"```\n") {
		t.Errorf("README.md has no Go block equal to shipOrders' LoopTx lines; want:\n%s", want.String())
	}
}
