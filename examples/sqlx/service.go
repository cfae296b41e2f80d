package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/examples/internal/shop"
	"github.com/mqlite/mqlite/outbox"
)

// schema is the service's own tables, in the store's file. processed_events
// is the handler's memory: one row per event handled, written in the same
// transaction as the handler's effect (a shipments row).
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
	`CREATE TABLE IF NOT EXISTS processed_events (
		event_id TEXT PRIMARY KEY,
		seq      INTEGER NOT NULL,
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
	db    *sqlx.DB
	out   *shop.LockedWriter // handlers run concurrently
	fault shop.FaultFunc     // set by SetFault, read by Handle
}

var _ shop.Service = (*Service)(nil)

// NewService creates the service's tables and queue (both may exist) and
// returns the service. Handle writes a line per event to out.
func NewService(ctx context.Context, st *mqlite.Store, out io.Writer) (*Service, error) {
	s := &Service{st: st, db: sqlx.NewDb(st.DB(), "sqlite"), out: &shop.LockedWriter{W: out}}
	for _, ddl := range schema {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
	}
	for _, q := range []string{shop.Queue, shop.RelayQueue} {
		err := st.CreateQueue(ctx, q, mqlite.QueueOptions{})
		if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
			return nil, fmt.Errorf("create queue %s: %w", q, err)
		}
	}
	return s, nil
}

// Store returns the store the service runs on.
func (s *Service) Store() *mqlite.Store { return s.st }

// SetFault sets the handler's fault injection (tests and the demo); it must
// not be called while Consume runs.
func (s *Service) SetFault(f shop.FaultFunc) { s.fault = f }

// Restock sets how many of item are on hand.
func (s *Service) Restock(ctx context.Context, item string, onHand int) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO stock (item, on_hand) VALUES (?, ?)
		ON CONFLICT (item) DO UPDATE SET on_hand = excluded.on_hand`, item, onHand)
	if err != nil {
		return fmt.Errorf("restock %s: %w", item, err)
	}
	return nil
}

// Place is PlaceOrder that returns only the order's id.
func (s *Service) Place(ctx context.Context, item string, quantity int, totalCents int64) (int64, error) {
	o, err := s.PlaceOrder(ctx, item, quantity, totalCents)
	return o.ID, err
}

// PlaceOrder inserts the order, sends its order.placed event and takes the
// quantity from stock, all in one *sqlx.Tx: when any step fails
// (shop.ErrOutOfStock, shop.ErrUnknownItem) neither the order row nor the
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
		// One event for the in-process handler, the same for the relay.
		for _, q := range []string{shop.Queue, shop.RelayQueue} {
			_, err := outbox.SendOne(txCtx, tx, q, outbox.Message{
				Body:      body,
				MessageID: fmt.Sprintf("order-%d", o.ID), // a retried send is recognised
				Subject:   shop.SubjectPlaced,
			})
			if err != nil {
				return fmt.Errorf("send %s to %s: %w", shop.SubjectPlaced, q, err)
			}
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
			return shop.ErrOutOfStock
		}
		return fmt.Errorf("reserve stock: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("reserve stock: %w", err)
	} else if n == 0 {
		return shop.ErrUnknownItem
	}
	return nil
}

// Consume runs a consumer.Loop of Handle over the queue until ctx is
// cancelled.
func (s *Service) Consume(ctx context.Context, opts consumer.LoopConfig) error {
	if err := consumer.Loop(ctx, s.st, shop.Queue, s.Handle, opts); err != nil {
		return fmt.Errorf("consume %s: %w", shop.Queue, err)
	}
	return nil
}

// Handle is the consumer.Handler of order.placed: it ships the order. It is
// idempotent: the event's id goes into processed_events in the same
// transaction as the shipment, so a redelivery (the handler failed after the
// commit, or its Complete was lost) finds the row and ships nothing again.
func (s *Service) Handle(ctx context.Context, m mqlite.Message) error {
	var o Order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		// Retrying cannot fix a body that does not parse.
		return consumer.Permanent(fmt.Errorf("decode event seq %d: %w", m.Seq, err))
	}
	var duplicate bool
	err := mqlite.InTx(ctx, s.db.BeginTxx, func(txCtx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(txCtx, `INSERT INTO processed_events (event_id, seq, order_id)
			VALUES (?, ?, ?) ON CONFLICT (event_id) DO NOTHING`, shop.EventID(m), m.Seq, o.ID)
		if err != nil {
			return fmt.Errorf("record event: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("record event: %w", err)
		}
		if duplicate = n == 0; duplicate {
			return nil // handled before: the shipment exists
		}
		if _, err := tx.ExecContext(txCtx, `INSERT INTO shipments (order_id) VALUES (?)`, o.ID); err != nil {
			return fmt.Errorf("ship order %d: %w", o.ID, err)
		}
		return s.fault.At(shop.StageInTx, m)
	})
	if err != nil {
		return err
	}
	if duplicate {
		s.out.Handled(m, "")
		return nil
	}
	s.out.Handled(m, fmt.Sprintf("shipped order %d (%d %s)", o.ID, o.Quantity, o.Item))
	return s.fault.At(shop.StageAfterCommit, m)
}

// Counts counts the rows of the service's tables.
func (s *Service) Counts(ctx context.Context) (shop.Counts, error) {
	var c struct {
		Orders       int64 `db:"orders"`
		Shipments    int64 `db:"shipments"`
		Processed    int64 `db:"processed"`
		ShippedTwice int64 `db:"shipped_twice"`
	}
	err := s.db.GetContext(ctx, &c, countsQuery)
	if err != nil {
		return shop.Counts{}, fmt.Errorf("count rows: %w", err)
	}
	return shop.Counts(c), nil
}

const countsQuery = `SELECT
	(SELECT count(*) FROM orders) AS orders,
	(SELECT count(*) FROM shipments) AS shipments,
	(SELECT count(*) FROM processed_events) AS processed,
	(SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id HAVING count(*) > 1)) AS shipped_twice`
