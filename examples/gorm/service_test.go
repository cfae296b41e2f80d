package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libtnb/sqlite"
	"go.uber.org/goleak"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/gormtx"
	"github.com/mqlite/mqlite/outbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// open returns the service on a fresh store, with 100 books and no piano.
func open(t *testing.T) *Service {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "shop.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	svc, err := NewService(ctx, st, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for item, n := range map[string]int{"book": 100, "piano": 0} {
		if err := svc.Restock(ctx, item, n); err != nil {
			t.Fatal(err)
		}
	}
	return svc
}

func counts(t *testing.T, svc *Service) Counts {
	t.Helper()
	c, err := svc.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFailedOrderLeavesNeitherRowNorEvent: an order the stock cannot cover
// rolls back its row and its event together.
func TestFailedOrderLeavesNeitherRowNorEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := open(t)
	if _, err := svc.PlaceOrder(ctx, "piano", 1, 250000); !errors.Is(err, ErrOutOfStock) {
		t.Fatalf("PlaceOrder = %v, want ErrOutOfStock", err)
	}
	if _, err := svc.PlaceOrder(ctx, "harp", 1, 1); !errors.Is(err, ErrUnknownItem) {
		t.Fatalf("PlaceOrder = %v, want ErrUnknownItem", err)
	}
	if c := counts(t, svc); c.Orders != 0 {
		t.Fatalf("%d orders left behind", c.Orders)
	}
	qs, err := svc.st.Stats(ctx, Queue)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Total() != 0 {
		t.Fatalf("events left behind: %+v", qs)
	}
}

// TestEachEventHandledOnce: every event's first delivery fails, before the
// handler's transaction or inside it after the shipment row; each order is
// shipped once, and the shipments are exactly the completed events.
func TestEachEventHandledOnce(t *testing.T) {
	t.Parallel()
	const n = 20
	tests := []struct {
		name  string
		fault func(svc *Service, f func(mqlite.Message) error)
	}{
		{"before the transaction", func(svc *Service, f func(mqlite.Message) error) { svc.BeforeTx = f }},
		{"in the transaction", func(svc *Service, f func(mqlite.Message) error) { svc.InTx = f }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			svc := open(t)
			for range n {
				if _, err := svc.PlaceOrder(ctx, "book", 1, 1299); err != nil {
					t.Fatal(err)
				}
			}
			var failed atomic.Int32
			tc.fault(svc, func(m mqlite.Message) error {
				if m.DeliveryCount == 1 {
					failed.Add(1)
					return errors.New("injected failure")
				}
				return nil
			})
			if err := consumeUntil(ctx, svc, n); err != nil {
				t.Fatal(err)
			}
			if c := counts(t, svc); c != (Counts{Orders: n, Shipments: n}) || failed.Load() != n {
				t.Fatalf("counts %+v after %d failed first deliveries, want %d of each and none twice", c, failed.Load(), n)
			}
		})
	}
}

// TestRun runs the example as `go run` does, on a fresh file.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, filepath.Join(t.TempDir(), "shop.db")); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"out of stock: rolled back",
		"order-3 (seq 3, delivery 1): simulated failure: shipment rolled back",
		"order-3 (seq 3, delivery 2): shipped order 3 (3 tea) with the completion",
		"now: 3 orders, 3 shipments, 0 events left, 0 orders shipped twice",
		"mqlite: transaction does not belong to an mqlite store",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

func count(t *testing.T, svc *Service, query string) int64 {
	t.Helper()
	var n int64
	if err := svc.db.Raw(query).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestWrongHandleIsNotAStore places an order through GORM opened on the
// store's file by itself, not on st.DB(): the outbox refuses the
// transaction with mqlite.ErrNotAStore and the order row rolls back with it.
func TestWrongHandleIsNotAStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := open(t)
	wrong, err := gorm.Open(sqlite.Open(svc.st.Path()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := wrong.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })

	if _, err := placeOrder(ctx, wrong, "book", 1, 1299); !errors.Is(err, mqlite.ErrNotAStore) {
		t.Fatalf("placeOrder on a second handle = %v, want mqlite.ErrNotAStore", err)
	}
	if n := count(t, svc, `SELECT count(*) FROM orders`); n != 0 {
		t.Errorf("the refused order left %d rows", n)
	}
	qs, err := svc.st.Stats(ctx, Queue)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Total() != 0 {
		t.Errorf("the refused order left messages: %+v", qs)
	}
	// The same order on the store's DB goes through.
	if _, err := svc.PlaceOrder(ctx, "book", 1, 1299); err != nil {
		t.Fatalf("PlaceOrder on st.DB(): %v", err)
	}
}

// TestGORMBorrowsTheStoreConnection checks that GORM given Conn: st.DB()
// opens no connection of its own and reaches the *sql.Tx of its
// transactions.
func TestGORMBorrowsTheStoreConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := open(t)
	if _, err := svc.PlaceOrder(ctx, "book", 2, 2598); err != nil {
		t.Fatal(err)
	}
	pool, err := svc.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	if pool != svc.st.DB() {
		t.Errorf("gorm's *sql.DB is not the store's")
	}
	if s := svc.st.DB().Stats(); s.MaxOpenConnections != 1 || s.OpenConnections > 1 {
		t.Errorf("store pool stats %+v, want one connection", s)
	}
	if _, err := gormtx.SQLTx(svc.db); err == nil {
		t.Errorf("SQLTx outside a transaction succeeded")
	}
	err = svc.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		_, err := gormtx.SQLTx(tx)
		return err
	})
	if err != nil {
		t.Errorf("SQLTx inside db.Transaction: %v", err)
	}
}

// TestControlCompletionOutsideTheTransaction is TestEachEventHandledOnce's
// control: the same steps committed in a transaction of their own and the
// event completed after it (consumer.Loop), with each first delivery
// failing between the two, ship every order twice. The counts above can
// fail; LoopTx is what keeps them.
func TestControlCompletionOutsideTheTransaction(t *testing.T) {
	t.Parallel()
	const n = 20
	ctx := context.Background()
	svc := open(t)
	for range n {
		if _, err := svc.PlaceOrder(ctx, "book", 1, 1299); err != nil {
			t.Fatal(err)
		}
	}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	err := consumer.Loop(loopCtx, svc.st, Queue, func(ctx context.Context, m mqlite.Message) error {
		step, err := svc.Handle(ctx, m)
		if err != nil {
			return err
		}
		err = svc.st.Tx(ctx, func(tx *mqlite.Tx) error { return step(tx.Context(), ownTx{tx.SQL()}) })
		if err == nil && m.DeliveryCount == 1 {
			err = errors.New("injected failure after the commit")
		}
		return err
	}, consumer.LoopConfig{
		Backoff:  consumer.Backoff{Initial: time.Millisecond, Jitter: -1},
		Observer: &completions{left: n, stop: stop},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := counts(t, svc); c.Shipments != 2*n || c.ShippedTwice != n {
		t.Fatalf("counts %+v, want every one of %d orders shipped twice", c, n)
	}
}

// ownTx is a consumer.Tx on a transaction the caller commits.
type ownTx struct{ tx *sql.Tx }

func (t ownTx) Send(ctx context.Context, queue string, msgs ...outbox.Message) error {
	_, err := outbox.SendBatch(ctx, t.tx, queue, msgs)
	return err
}

func (t ownTx) SQL() *sql.Tx { return t.tx }
