package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// Example is the README's first example: an order row and its event in one
// transaction, with the orders table it writes. TestREADMEExample keeps the
// README's copy equal to placeOrder's lines between the README markers.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mqlite-readme")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := placeOrder(ctx, filepath.Join(dir, "app.db")); err != nil {
		log.Fatal(err)
	}
	// Output:
	// orders: 1, messages: 1: {"order_id":1}
}

// placeOrder is the README's example, on the file at path.
func placeOrder(ctx context.Context, path string) error {
	// README:begin
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		return err
	}
	defer st.Close()

	// The application's own table lives in the same file.
	_, err = st.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id INTEGER PRIMARY KEY, item TEXT NOT NULL, total_cents INTEGER NOT NULL)`)
	if err != nil {
		return err
	}
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil &&
		!errors.Is(err, mqlite.ErrQueueExists) {
		return err
	}

	// The order row and its event commit together, or neither does.
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := tx.SQL().ExecContext(tx.Context(),
			`INSERT INTO orders (item, total_cents) VALUES (?, ?)`, "book", 1299)
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		_, err = outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{
			Body:      fmt.Appendf(nil, `{"order_id":%d}`, id),
			MessageID: fmt.Sprintf("order-%d", id), // a retried send is recognised
			Subject:   "order.placed",
		})
		return err
	})
	// README:end
	if err != nil {
		return err
	}
	var orders int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		return err
	}
	msgs, err := st.Peek(ctx, "orders", mqlite.PeekParams{})
	if err != nil {
		return err
	}
	fmt.Printf("orders: %d, messages: %d: %s\n", orders, len(msgs), msgs[0].Body)
	return nil
}

// TestREADMEExample: the README's first Go block is placeOrder's lines
// between the README markers, so what the README shows is what Example
// compiles and runs.
func TestREADMEExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "\t// README:begin\n")
	body, _, _ = strings.Cut(body, "\t// README:end\n")
	var want strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```go\n")
	block, _, _ = strings.Cut(block, "```\n")
	if block != want.String() {
		t.Errorf("README.md's first Go block differs from placeOrder's; want:\n%s\ngot:\n%s", want.String(), block)
	}
}
