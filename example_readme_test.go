package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// Example is the README's first example: an order row and its event in one
// transaction, with the orders table it writes. TestREADMEExample keeps the
// README's copy equal to placeOrder's lines between the README markers.
func Example() {
	path, done := readmeFile()
	defer done()
	if err := placeOrder(context.Background(), path); err != nil {
		log.Fatal(err)
	}
	// Output:
	// orders: 1, messages: 1: {"order_id":1}
}

// readmeFile returns the path of a store file in a fresh folder for the
// README's examples; done removes the folder.
func readmeFile() (path string, done func()) {
	dir, err := os.MkdirTemp("", "mqlite-readme")
	if err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dir, "app.db"), func() { os.RemoveAll(dir) }
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
	want, readme := readmeSnippet(t, "example_readme_test.go", "README")
	_, block, _ := strings.Cut(readme, "```go\n")
	block, _, _ = strings.Cut(block, "```\n")
	if block != want {
		t.Errorf("README.md's first Go block differs from placeOrder's; want:\n%s\ngot:\n%s", want, block)
	}
}

// readmeSnippet returns the lines of file between the comments
// "// marker:begin" and "// marker:end", one tab less indented, as the
// README shows them, and the README itself.
func readmeSnippet(t *testing.T, file, marker string) (snippet, readme string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\t// "+marker+":begin\n")
	body, _, ok2 := strings.Cut(body, "\t// "+marker+":end\n")
	if !ok || !ok2 {
		t.Fatalf("%s has no %s:begin and :end markers", file, marker)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		b.WriteString(strings.TrimPrefix(line, "\t"))
	}
	r, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), string(r)
}

// Example_loopTx is the README's LoopTx example: the shipment row, the
// shipped event and the order's completion commit in one transaction.
// TestREADMELoopTx keeps the README's copy equal to shipOrders' lines
// between the README-looptx markers.
func Example_loopTx() {
	ctx := context.Background()
	path, done := readmeFile()
	defer done()
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
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	bookCarrier := func(_ context.Context, body []byte) (string, error) {
		stop() // one order: Loop drains and returns
		return "label-" + string(body), nil
	}

	// README-looptx:begin
	// The handler's table, and the queue its onward messages go to.
	_, err = st.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS shipments (
		order_msg TEXT PRIMARY KEY, label TEXT NOT NULL)`)
	if err != nil {
		return err
	}
	if err := st.CreateQueue(ctx, "shipped", mqlite.QueueOptions{}); err != nil &&
		!errors.Is(err, mqlite.ErrQueueExists) {
		return err
	}
	err = consumer.LoopTx(ctx, st, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
		label, err := bookCarrier(ctx, m.Body) // slow external work: before the transaction
		if err != nil {
			return nil, err // Abandon with backoff
		}
		// The step runs in the transaction that completes m: the row, the
		// onward message and the completion commit together, or none does.
		return func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx) // the *sql.Tx: embedded only
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx,
				`INSERT INTO shipments (order_msg, label) VALUES (?, ?)`, m.MessageID, label)
			if err != nil {
				return err
			}
			return tx.Send(ctx, "shipped", outbox.Message{Body: []byte(label), MessageID: "shipped-" + m.MessageID})
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
	want, readme := readmeSnippet(t, "example_readme_test.go", "README-looptx")
	if !strings.Contains(readme, "```go\n"+want+"```\n") {
		t.Errorf("README.md has no Go block equal to shipOrders' LoopTx lines; want:\n%s", want)
	}
}

// TestREADMECreatesWhatItUses: every table a Go block of the README writes
// (INSERT INTO) and every queue it sends to or consumes is created in that
// block or an earlier one, so that each block runs after the ones above it.
func TestREADMECreatesWhatItUses(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	uses := regexp.MustCompile(`INSERT INTO (\w+)|(?:Send(?:One)?|LoopTx|Loop)\(\w+(?:\.Context\(\))?, (?:\w+, )?"([\w.-]+)"`)
	makes := regexp.MustCompile(`CREATE TABLE (?:IF NOT EXISTS )?(\w+)|CreateQueue\(\w+, "([\w.-]+)"`)
	blocks := strings.Split(string(readme), "```go\n")[1:]
	for i, block := range blocks {
		block, _, _ = strings.Cut(block, "```\n")
		for _, m := range makes.FindAllStringSubmatch(block, -1) {
			created[m[1]+m[2]] = true
		}
		for _, m := range uses.FindAllStringSubmatch(block, -1) {
			if name := m[1] + m[2]; !created[name] {
				t.Errorf("README.md's Go block %d uses %q, which neither it nor a block above creates:\n%s", i+1, name, block)
			}
		}
	}
}
