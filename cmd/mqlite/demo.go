package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

const demoQueue = "orders"

// errDeclined is what the demo's second transaction fails with.
var errDeclined = errors.New("payment declined")

// order is a row of the demo's business table, and the body of its event.
type order struct {
	ID         int64  `json:"order_id"`
	Item       string `json:"item"`
	TotalCents int64  `json:"total_cents"`
}

// demo shows the transactional outbox on the file at path: three orders and
// their events commit in one transaction, a fourth order and its event roll
// back together, the queue is printed to w, and a consumer.Loop drains it.
// It can run again on the same file: each run adds three orders.
func demo(ctx context.Context, w io.Writer, path string) (err error) {
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()

	switch err := st.CreateQueue(ctx, demoQueue, mqlite.QueueOptions{}); {
	case err == nil:
		fmt.Fprintf(w, "created queue %q in %s\n", demoQueue, path)
	case errors.Is(err, mqlite.ErrQueueExists):
		fmt.Fprintf(w, "queue %q already exists in %s\n", demoQueue, path)
	default:
		return err
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id INTEGER PRIMARY KEY, item TEXT, total_cents INTEGER)`); err != nil {
		return fmt.Errorf("create table orders: %w", err)
	}

	// 1. Three orders and their events in one transaction.
	placed := make([]order, 0, 3)
	var seqs []int64
	var resent int64
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, o := range []order{{Item: "book", TotalCents: 1299}, {Item: "lamp", TotalCents: 4500}, {Item: "tea", TotalCents: 800}} {
			o, seq, err := placeOrder(tx, o)
			if err != nil {
				return err
			}
			placed, seqs = append(placed, o), append(seqs, seq)
		}
		// A retry of the first event (same MessageID, same body) is
		// collapsed by de-duplication: it returns the original seq.
		msg, err := orderEvent(placed[0])
		if err != nil {
			return err
		}
		resent, err = outbox.SendOne(tx.Context(), tx.SQL(), demoQueue, msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("first transaction: %w", err)
	}
	fmt.Fprintln(w, "\ntransaction 1: committed")
	for i, o := range placed {
		fmt.Fprintf(w, "  order %d (%s) with event seq %d\n", o.ID, o.Item, seqs[i])
	}
	fmt.Fprintf(w, "  resent the event of order %d: seq %d came back, nothing was inserted (dedup)\n", placed[0].ID, resent)

	// 2. An order and its event, then a failure: both roll back.
	var declined order
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		o, _, err := placeOrder(tx, order{Item: "piano", TotalCents: 250000})
		if err != nil {
			return err
		}
		declined = o
		return errDeclined
	})
	if !errors.Is(err, errDeclined) {
		return fmt.Errorf("second transaction: %v, want it rolled back with %v", err, errDeclined)
	}
	fmt.Fprintf(w, "\ntransaction 2: order %d (%s) and its event rolled back: %v\n", declined.ID, declined.Item, err)

	if err := report(ctx, w, st.DB(), declined.ID); err != nil {
		return err
	}
	return consume(ctx, w, st)
}

// consume runs a consumer.Loop over the queue until it is empty: every
// order ships, except tea, which is out of stock for good and goes to the
// dead letters with consumer.Permanent.
func consume(ctx context.Context, w io.Writer, st *mqlite.Store) error {
	before, err := st.Stats(ctx, demoQueue)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nconsuming %d messages with consumer.Loop:\n", before.Active)
	if before.Active == 0 {
		return nil
	}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	handled := int64(0)
	err = consumer.Loop(loopCtx, st, demoQueue, func(ctx context.Context, m mqlite.Message) error {
		var o order
		err := json.Unmarshal(m.Body, &o)
		if err == nil && o.Item == "tea" {
			err = errors.New("tea is out of stock")
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fmt.Fprintf(w, "  seq %d: order %d: %v: dead-lettered\n", m.Seq, o.ID, err)
		} else {
			fmt.Fprintf(w, "  seq %d: shipped order %d (%s)\n", m.Seq, o.ID, o.Item)
		}
		if handled++; handled == before.Active {
			stop() // the queue is drained: Loop settles what it holds and returns
		}
		return consumer.Permanent(err) // nil stays nil: the message is completed
	}, consumer.LoopConfig{Concurrency: 1})
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	after, err := st.Stats(ctx, demoQueue)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "queue %q now: %d active, %d dead-lettered\n", demoQueue, after.Active, after.DeadLettered)
	return nil
}

// placeOrder inserts o into orders and sends its event in tx. It returns the
// order with its id and the event's seq.
func placeOrder(tx *mqlite.Tx, o order) (order, int64, error) {
	res, err := tx.SQL().ExecContext(tx.Context(),
		`INSERT INTO orders (item, total_cents) VALUES (?, ?)`, o.Item, o.TotalCents)
	if err != nil {
		return o, 0, fmt.Errorf("insert order: %w", err)
	}
	if o.ID, err = res.LastInsertId(); err != nil {
		return o, 0, err
	}
	msg, err := orderEvent(o)
	if err != nil {
		return o, 0, err
	}
	seq, err := outbox.SendOne(tx.Context(), tx.SQL(), demoQueue, msg)
	if err != nil {
		return o, 0, fmt.Errorf("send event of order %d: %w", o.ID, err)
	}
	return o, seq, nil
}

// orderEvent is the event of o. Its MessageID comes from the order id, so a
// retried send is recognised as the same message.
func orderEvent(o order) (outbox.Message, error) {
	body, err := json.Marshal(o)
	if err != nil {
		return outbox.Message{}, err
	}
	return outbox.Message{
		Body:       body,
		MessageID:  fmt.Sprintf("order-%d", o.ID),
		Subject:    "order.placed",
		Properties: map[string]string{"source": "mqlite demo"},
	}, nil
}

// report prints what the queue holds and how many orders exist, and checks
// that the rolled-back order is in neither table.
func report(ctx context.Context, w io.Writer, db *sql.DB, declinedID int64) error {
	fmt.Fprintf(w, "\nqueue %q holds:\n", demoQueue)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var messages int64
	err := eachRow(ctx, db, func(r *sql.Rows) error {
		var state string
		var n int64
		if err := r.Scan(&state, &n); err != nil {
			return err
		}
		messages += n
		_, err := fmt.Fprintf(tw, "  %s\t%d\n", state, n)
		return err
	}, `SELECT state, count(*) FROM mqlite_messages WHERE queue = ? AND settled_at IS NULL GROUP BY state ORDER BY state`, demoQueue)
	if err != nil {
		return fmt.Errorf("count messages: %w", err)
	}
	fmt.Fprintln(tw, "\nlast messages:")
	fmt.Fprintln(tw, "  seq\tsubject\tbody")
	err = eachRow(ctx, db, func(r *sql.Rows) error {
		var seq int64
		var subject, body string
		if err := r.Scan(&seq, &subject, &body); err != nil {
			return err
		}
		_, err := fmt.Fprintf(tw, "  %d\t%s\t%s\n", seq, subject, body)
		return err
	}, `SELECT id, coalesce(subject, ''), CAST(body AS TEXT) FROM
		(SELECT * FROM mqlite_messages WHERE queue = ? AND settled_at IS NULL ORDER BY id DESC LIMIT 5) ORDER BY id`, demoQueue)
	if err != nil {
		return fmt.Errorf("list messages: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var orders, declinedRows, declinedEvents int64
	err = db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders),
		(SELECT count(*) FROM orders WHERE id = ?1),
		(SELECT count(*) FROM mqlite_messages WHERE queue = ?2 AND message_id = 'order-' || ?1)`,
		declinedID, demoQueue).Scan(&orders, &declinedRows, &declinedEvents)
	if err != nil {
		return fmt.Errorf("count orders: %w", err)
	}
	fmt.Fprintf(w, "\norders rows: %d, messages: %d\n", orders, messages)
	if declinedRows != 0 || declinedEvents != 0 {
		return fmt.Errorf("the rolled-back order %d left %d order rows and %d messages", declinedID, declinedRows, declinedEvents)
	}
	fmt.Fprintf(w, "the rolled-back order %d left no order row and no message\n", declinedID)
	return nil
}

// eachRow runs query and calls fn for every row.
func eachRow(ctx context.Context, db *sql.DB, fn func(*sql.Rows) error, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func demoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "write orders and their events in one transaction, roll one back, show the queue",
		Long: `demo creates the queue "orders" and a business table orders, commits three orders
with their events in one transaction, rolls a fourth back, prints what the
queue holds and drains it with consumer.Loop.

Each run starts from a fresh file in a temporary folder, removed at the end,
so two runs print the same. With --db FILE it works on that file and keeps it:
a second run reuses the store and adds three more orders (it says so).`,
		Example: `  mqlite demo
  mqlite demo --db /tmp/demo.db`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.url != "" {
				return usagef("demo works on a file only (--db)")
			}
			if g.db != "" {
				if _, err := os.Stat(g.db); err == nil {
					fmt.Fprintf(g.stdout, "reusing %s: the orders and messages of its earlier runs stay\n", g.db)
				}
				return demo(cmd.Context(), g.stdout, g.db)
			}
			dir, err := os.MkdirTemp("", "mqlite-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			return demo(cmd.Context(), g.stdout, filepath.Join(dir, "demo.db"))
		},
	}
}
