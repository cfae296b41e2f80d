package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/examples/internal/shop"
	"github.com/mqlite/mqlite/gormtx"
	"github.com/mqlite/mqlite/outbox"
)

// Stock is how many of an item are on hand.
type Stock struct {
	Item   string `gorm:"primaryKey"`
	OnHand int    `gorm:"not null;check:on_hand >= 0"`
}

// Order is a row of orders, and the body of its order.placed event.
type Order struct {
	ID         int64  `gorm:"primaryKey" json:"order_id"`
	Item       string `gorm:"not null" json:"item"`
	Quantity   int    `gorm:"not null" json:"quantity"`
	TotalCents int64  `gorm:"not null" json:"total_cents"`
}

// Shipment is the handler's effect: one row per order shipped.
type Shipment struct {
	ID      int64 `gorm:"primaryKey"`
	OrderID int64 `gorm:"not null"`
}

// ProcessedEvent is the handler's memory: one row per event handled, written
// in the same transaction as its Shipment.
type ProcessedEvent struct {
	EventID string `gorm:"primaryKey"`
	Seq     int64  `gorm:"not null"`
	OrderID int64  `gorm:"not null"`
}

// OpenGORM returns GORM on the store's own *sql.DB. The dialector is given
// the connection (Conn), so it opens none of its own: GORM borrows the store's
// one connection, and Close stays the store's job (never close db.DB()).
func OpenGORM(st *mqlite.Store) (*gorm.DB, error) {
	db, err := gorm.Open(sqlite.New(sqlite.Config{Conn: st.DB()}), &gorm.Config{
		Logger: logger.Discard,
		// Single statements outside db.Transaction need no transaction of
		// their own: each is atomic on SQLite.
		SkipDefaultTransaction: true,
	})
	if err != nil {
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	return db, nil
}

// Service is a small order service on GORM: its tables and the mqlite queue
// share one file and one connection. It is safe for concurrent use.
type Service struct {
	st *mqlite.Store
	// db is GORM on the store's own *sql.DB (OpenGORM). A transaction
	// opened on any other handle cannot carry outbox messages
	// (mqlite.ErrNotAStore), and the file has only one writer.
	db    *gorm.DB
	out   *shop.LockedWriter // handlers run concurrently
	fault shop.FaultFunc     // set by SetFault, read by Handle
}

var _ shop.Service = (*Service)(nil)

// NewService migrates the service's tables and creates its queue (both may
// exist) and returns the service, on GORM over the store's DB. Handle writes
// a line per event to out.
func NewService(ctx context.Context, st *mqlite.Store, out io.Writer) (*Service, error) {
	db, err := OpenGORM(st)
	if err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).AutoMigrate(&Stock{}, &Order{}, &Shipment{}, &ProcessedEvent{}); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for _, q := range []string{shop.Queue, shop.RelayQueue} {
		err := st.CreateQueue(ctx, q, mqlite.QueueOptions{})
		if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
			return nil, fmt.Errorf("create queue %s: %w", q, err)
		}
	}
	return &Service{st: st, db: db, out: &shop.LockedWriter{W: out}}, nil
}

// Store returns the store the service runs on.
func (s *Service) Store() *mqlite.Store { return s.st }

// SetFault sets the handler's fault injection (tests and the demo); it must
// not be called while Consume runs.
func (s *Service) SetFault(f shop.FaultFunc) { s.fault = f }

// Restock sets how many of item are on hand.
func (s *Service) Restock(ctx context.Context, item string, onHand int) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{UpdateAll: true}).
		Create(&Stock{Item: item, OnHand: onHand}).Error
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
// quantity from stock, all in one GORM transaction: when any step fails
// (shop.ErrOutOfStock, shop.ErrUnknownItem) neither the order row nor the event exists.
func (s *Service) PlaceOrder(ctx context.Context, item string, quantity int, totalCents int64) (Order, error) {
	return placeOrder(ctx, s.db, item, quantity, totalCents)
}

// placeOrder is PlaceOrder on db. db must be GORM over the store's DB: on
// any other handle the outbox refuses the transaction with
// mqlite.ErrNotAStore and everything rolls back.
func placeOrder(ctx context.Context, db *gorm.DB, item string, quantity int, totalCents int64) (Order, error) {
	o := Order{Item: item, Quantity: quantity, TotalCents: totalCents}
	err := inTx(ctx, db, func(txCtx context.Context, tx *gorm.DB) error {
		if err := tx.Create(&o).Error; err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		body, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		// The outbox takes the *sql.Tx behind the GORM transaction.
		sqlTx, err := gormtx.SQLTx(tx)
		if err != nil {
			return err
		}
		// One event for the in-process handler, the same for the relay.
		for _, q := range []string{shop.Queue, shop.RelayQueue} {
			_, err := outbox.SendOne(txCtx, sqlTx, q, outbox.Message{
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
		return reserve(tx, item, quantity)
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order of %d %s: %w", quantity, item, err)
	}
	return o, nil
}

// reserve takes quantity of item from stock.
func reserve(tx *gorm.DB, item string, quantity int) error {
	res := tx.Model(&Stock{}).Where("item = ?", item).
		Update("on_hand", gorm.Expr("on_hand - ?", quantity))
	switch {
	case res.Error != nil && strings.Contains(res.Error.Error(), "CHECK constraint failed"):
		return shop.ErrOutOfStock
	case res.Error != nil:
		return fmt.Errorf("reserve stock: %w", res.Error)
	case res.RowsAffected == 0:
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
	err := inTx(ctx, s.db, func(_ context.Context, tx *gorm.DB) error {
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).
			Create(&ProcessedEvent{EventID: shop.EventID(m), Seq: m.Seq, OrderID: o.ID})
		if res.Error != nil {
			return fmt.Errorf("record event: %w", res.Error)
		}
		if duplicate = res.RowsAffected == 0; duplicate {
			return nil // handled before: the shipment exists
		}
		if err := tx.Create(&Shipment{OrderID: o.ID}).Error; err != nil {
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
	var c shop.Counts
	err := s.db.WithContext(ctx).Raw(`SELECT
		(SELECT count(*) FROM orders) AS orders,
		(SELECT count(*) FROM shipments) AS shipments,
		(SELECT count(*) FROM processed_events) AS processed,
		(SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id HAVING count(*) > 1)) AS shipped_twice`).
		Scan(&c).Error
	if err != nil {
		return shop.Counts{}, fmt.Errorf("count rows: %w", err)
	}
	return c, nil
}

// inTx runs fn in db.Transaction and commits when fn returns nil. It keeps
// the contract of mqlite.Store.Tx: the statements run with a context that is
// never cancelled (an interrupted statement would wedge the store's only
// connection), and a ctx cancelled before the commit rolls everything back.
func inTx(ctx context.Context, db *gorm.DB, fn func(txCtx context.Context, tx *gorm.DB) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	txCtx := context.WithoutCancel(ctx)
	return db.WithContext(txCtx).Transaction(func(tx *gorm.DB) error {
		if err := fn(txCtx, tx); err != nil {
			return err
		}
		return ctx.Err() // cancelled before the commit: roll back
	})
}
