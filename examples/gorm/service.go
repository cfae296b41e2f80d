package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/gormtx"
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

// Shipment is the handler's effect: one row per order shipped, committed
// by consumer.LoopTx with the event's completion (no table of processed
// ids).
type Shipment struct {
	ID      int64 `gorm:"primaryKey"`
	OrderID int64 `gorm:"not null"`
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
	db *gorm.DB

	mu  sync.Mutex // handlers run concurrently: one line at a time
	out io.Writer

	// BeforeTx and InTx, when set, are called by Handle for each event:
	// BeforeTx before its transaction (where a call to a carrier would
	// go), InTx inside it, after the shipment row: an error fails the
	// event there (in the transaction, the shipment row rolls back with
	// the completion). Tests and the demo set them before Consume.
	BeforeTx, InTx func(mqlite.Message) error
}

// NewService migrates the service's tables and creates its queue (both may
// exist) and returns the service, on GORM over the store's DB. Handle writes
// a line per event to out.
func NewService(ctx context.Context, st *mqlite.Store, out io.Writer) (*Service, error) {
	db, err := OpenGORM(st)
	if err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).AutoMigrate(&Stock{}, &Order{}, &Shipment{}); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	err = st.CreateQueue(ctx, Queue, mqlite.QueueOptions{})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		return nil, fmt.Errorf("create queue %s: %w", Queue, err)
	}
	return &Service{st: st, db: db, out: out}, nil
}

// Restock sets how many of item are on hand.
func (s *Service) Restock(ctx context.Context, item string, onHand int) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{UpdateAll: true}).
		Create(&Stock{Item: item, OnHand: onHand}).Error
	if err != nil {
		return fmt.Errorf("restock %s: %w", item, err)
	}
	return nil
}

// PlaceOrder inserts the order, sends its order.placed event and takes the
// quantity from stock, all in one GORM transaction: when any step fails
// (ErrOutOfStock, ErrUnknownItem) neither the order row nor the event exists.
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
		_, err = outbox.SendOne(txCtx, sqlTx, Queue, outbox.Message{
			Body:      body,
			MessageID: fmt.Sprintf("order-%d", o.ID), // a retried send is recognised
			Subject:   SubjectPlaced,
		})
		if err != nil {
			return fmt.Errorf("send %s: %w", SubjectPlaced, err)
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
		return ErrOutOfStock
	case res.Error != nil:
		return fmt.Errorf("reserve stock: %w", res.Error)
	case res.RowsAffected == 0:
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
// transaction; the step it returns creates the Shipment with GORM on the
// step's transaction (gormOn), which LoopTx commits together with the
// event's completion. A failure before the commit rolls the row back and
// the event comes again; after the commit the event is completed and never
// comes again: each order ships once.
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
		sqlTx, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		if err := gormOn(ctx, s.db, sqlTx).Create(&Shipment{OrderID: o.ID}).Error; err != nil {
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

// gormOn returns a GORM session of db whose statements run on tx, the
// *sql.Tx a consumer.TxStep gets: what it writes commits or rolls back with
// tx (GORM's Begin sets a session's ConnPool the same way). Never call
// Commit or Rollback on it: LoopTx ends tx. gormtx.SQLTx of it is tx again,
// for outbox.SendOne.
func gormOn(ctx context.Context, db *gorm.DB, tx *sql.Tx) *gorm.DB {
	gtx := db.Session(&gorm.Session{Context: ctx, NewDB: true})
	gtx.Statement.ConnPool = tx
	return gtx
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
	Orders, Shipments int64
	Pending           int64 `gorm:"-"` // events in the queue, not completed yet
	ShippedTwice      int64 // orders with more than one shipment
}

// Counts counts the rows of the service's tables and the events left.
func (s *Service) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := s.db.WithContext(ctx).Raw(`SELECT
		(SELECT count(*) FROM orders) AS orders,
		(SELECT count(*) FROM shipments) AS shipments,
		(SELECT count(*) FROM (SELECT 1 FROM shipments GROUP BY order_id HAVING count(*) > 1)) AS shipped_twice`).
		Scan(&c).Error
	if err != nil {
		return Counts{}, fmt.Errorf("count rows: %w", err)
	}
	qs, err := s.st.Stats(ctx, Queue)
	if err != nil {
		return Counts{}, fmt.Errorf("count events: %w", err)
	}
	c.Pending = int64(qs.Total())
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
