package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// Queue is the queue the order events go to.
const Queue = "orders"

// SubjectPlaced is the subject of the event of a placed order.
const SubjectPlaced = "order.placed"

// ErrOutOfStock is PlaceOrder's error when the stock cannot cover the order.
// The order row and its event, already written in the transaction, roll back
// with it.
var ErrOutOfStock = errors.New("out of stock")

// ErrUnknownItem is PlaceOrder's error for an item with no stock row.
var ErrUnknownItem = errors.New("unknown item")

// schema is the service's own tables, in the store's file. A shipments row
// is the handler's effect: consumer.LoopTx commits it with the event's
// completion, so no table of processed ids is needed.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS stock (
		item    TEXT PRIMARY KEY,
		on_hand INTEGER NOT NULL CHECK (on_hand >= 0))`,
	`CREATE TABLE IF NOT EXISTS orders (
		id          INTEGER PRIMARY KEY,
		item        TEXT NOT NULL,
		quantity    INTEGER NOT NULL,
		total_cents INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS shipments (
		id       INTEGER PRIMARY KEY,
		order_id INTEGER NOT NULL)`,
}

// Order is a row of orders, and the body of its order.placed event.
type Order struct {
	ID         int64  `db:"id" json:"order_id"`
	Item       string `db:"item" json:"item"`
	Quantity   int    `db:"quantity" json:"quantity"`
	TotalCents int64  `db:"total_cents" json:"total_cents"`
}

// Service is a small order service on sqlx: its tables and the mqlite queue
// share one file and one connection. It is safe for concurrent use.
type Service struct {
	st *mqlite.Store
	// db is sqlx over the store's own *sql.DB. It must be Store.DB(): a
	// transaction opened on any other handle cannot carry outbox messages
	// (mqlite.ErrNotAStore), and the file has only one writer.
	db *sqlx.DB

	mu  sync.Mutex // handlers run concurrently: one line at a time
	out io.Writer

	// BeforeTx and InTx, when set, are called by Handle for each event:
	// BeforeTx before its transaction (where a call to a carrier would
	// go), InTx inside it, after the shipment row: an error fails the
	// event there (in the transaction, the shipment row rolls back with
	// the completion). Tests and the demo set them before Consume.
	BeforeTx, InTx func(mqlite.Message) error
}

// NewService creates the service's tables and queue (both may exist) and
// returns the service. Handle writes a line per event to out.
func NewService(ctx context.Context, st *mqlite.Store, out io.Writer) (*Service, error) {
	s := &Service{st: st, db: sqlx.NewDb(st.DB(), "sqlite"), out: out}
	for _, ddl := range schema {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
	}
	err := st.CreateQueue(ctx, Queue, mqlite.QueueOptions{})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		return nil, fmt.Errorf("create queue %s: %w", Queue, err)
	}
	return s, nil
}

// Restock sets how many of item are on hand.
func (s *Service) Restock(ctx context.Context, item string, onHand int) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO stock (item, on_hand) VALUES (?, ?)
		ON CONFLICT (item) DO UPDATE SET on_hand = excluded.on_hand`, item, onHand)
	if err != nil {
		return fmt.Errorf("restock %s: %w", item, err)
	}
	return nil
}

// PlaceOrder inserts the order, sends its order.placed event and takes the
// quantity from stock, all in one *sqlx.Tx: when any step fails
// (ErrOutOfStock, ErrUnknownItem) neither the order row nor the
// event exists.
func (s *Service) PlaceOrder(ctx context.Context, item string, quantity int, totalCents int64) (Order, error) {
	o := Order{Item: item, Quantity: quantity, TotalCents: totalCents}
	err := mqlite.InTx(ctx, s.db.BeginTxx, func(txCtx context.Context, tx *sqlx.Tx) error {
		res, err := tx.NamedExecContext(txCtx, `INSERT INTO orders (item, quantity, total_cents)
			VALUES (:item, :quantity, :total_cents)`, o)
		if err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if o.ID, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("order id: %w", err)
		}
		body, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		// The *sqlx.Tx goes to the outbox as it is: it embeds the *sql.Tx.
		_, err = outbox.SendOne(txCtx, tx, Queue, outbox.Message{
			Body:      body,
			MessageID: fmt.Sprintf("order-%d", o.ID), // a retried send is recognised
			Subject:   SubjectPlaced,
		})
		if err != nil {
			return fmt.Errorf("send %s: %w", SubjectPlaced, err)
		}
		// Last, so that a failure here shows the order and the event
		// rolling back together.
		return reserve(txCtx, tx, item, quantity)
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order of %d %s: %w", quantity, item, err)
	}
	return o, nil
}

// reserve takes quantity of item from stock.
func reserve(ctx context.Context, tx *sqlx.Tx, item string, quantity int) error {
	res, err := tx.ExecContext(ctx, `UPDATE stock SET on_hand = on_hand - ? WHERE item = ?`, quantity, item)
	if err != nil {
		if strings.Contains(err.Error(), "CHECK constraint failed") {
			return ErrOutOfStock
		}
		return fmt.Errorf("reserve stock: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("reserve stock: %w", err)
	} else if n == 0 {
		return ErrUnknownItem
	}
	return nil
}

// Consume runs a consumer.LoopTx of Handle over the queue until ctx is
// cancelled: each event's shipment row and its completion commit in one
// transaction.
func (s *Service) Consume(ctx context.Context, opts consumer.LoopConfig) error {
	if err := consumer.LoopTx(ctx, s.st, Queue, s.Handle, opts); err != nil {
		return fmt.Errorf("consume %s: %w", Queue, err)
	}
	return nil
}

// Handle is the consumer.TxHandler of order.placed: it ships the order. Its
// slow part (BeforeTx, where a call to a carrier goes) runs outside any
// transaction; the step it returns writes the shipments row, which LoopTx
// commits together with the event's completion. A failure before the
// commit rolls the row back and the event comes again; after the commit
// the event is completed and never comes again: each order ships once.
func (s *Service) Handle(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
	var o Order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		// Retrying cannot fix a body that does not parse.
		return nil, consumer.Permanent(fmt.Errorf("decode event seq %d: %w", m.Seq, err))
	}
	if err := call(s.BeforeTx, m); err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx consumer.Tx) error {
		// consumer.SQL(tx) is the *sql.Tx on the store's connection; sqlx's
		// named queries work on it through s.db's mapper.
		sqlTx, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		q, args, err := s.db.BindNamed(`INSERT INTO shipments (order_id) VALUES (:order_id)`, map[string]any{"order_id": o.ID})
		if err != nil {
			return fmt.Errorf("ship order %d: %w", o.ID, err)
		}
		if _, err := sqlTx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("ship order %d: %w", o.ID, err)
		}
		if err := call(s.InTx, m); err != nil {
			s.printf("  %s (seq %d, delivery %d): %v: shipment rolled back\n", m.MessageID, m.Seq, m.DeliveryCount, err)
			return err
		}
		s.printf("  %s (seq %d, delivery %d): shipped order %d (%d %s) with the completion\n", m.MessageID, m.Seq, m.DeliveryCount, o.ID, o.Quantity, o.Item)
		return nil
	}, nil
}

// call calls f, when it is set.
func call(f func(mqlite.Message) error, m mqlite.Message) error {
	if f == nil {
		return nil
	}
	return f(m)
}

func (s *Service) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format, args...)
}

// Counts is how many rows the service's tables hold.
type Counts struct {
	Orders       int64 `db:"orders"`
	Shipments    int64 `db:"shipments"`
	Pending      int64 `db:"-"`             // events in the queue, not completed yet
	ShippedTwice int64 `db:"shipped_twice"` // orders with more than one shipment
}

// Counts counts the rows of the service's tables and the events left.
func (s *Service) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	if err := s.db.GetContext(ctx, &c, countsQuery); err != nil {
		return Counts{}, fmt.Errorf("count rows: %w", err)
	}
	qs, err := s.st.Stats(ctx, Queue)
	if err != nil {
		return Counts{}, fmt.Errorf("count events: %w", err)
	}
	c.Pending = int64(qs.Total())
	return c, nil
}

const countsQuery = `SELECT
	(SELECT count(*) FROM orders) AS orders,
	(SELECT count(*) FROM shipments) AS shipments,
	(SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id HAVING count(*) > 1)) AS shipped_twice`
