package main

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/libtnb/sqlite"
	"go.uber.org/goleak"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/examples/internal/shop"
	"github.com/mqlite/mqlite/examples/internal/shop/shoptest"
	"github.com/mqlite/mqlite/gormtx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestService runs the examples' suite: a failed order leaves neither row
// nor event, each event is handled exactly once when its first delivery
// fails inside the handler's transaction or after its commit, and the
// webhook receiver verifies every relayed event's signature.
func TestService(t *testing.T) {
	t.Parallel()
	shoptest.Run(t, newService)
}

func newService(t *testing.T, st *mqlite.Store) shop.Service {
	svc, err := NewService(context.Background(), st, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func count(t *testing.T, svc *Service, query string) int64 {
	t.Helper()
	var n int64
	if err := svc.db.Raw(query).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestRun(t *testing.T) {
	t.Parallel()
	shoptest.Demo(t, run, "mqlite: transaction does not belong to an mqlite store")
}

// TestWrongHandleIsNotAStore places an order through GORM opened on the
// store's file by itself, not on st.DB(): the outbox refuses the
// transaction with mqlite.ErrNotAStore and the order row rolls back with it.
func TestWrongHandleIsNotAStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := shoptest.Open(t, newService).(*Service)
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
	qs, err := svc.st.Stats(ctx, shop.Queue)
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
	svc := shoptest.Open(t, newService).(*Service)
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
