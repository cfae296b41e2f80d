package gormtx_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/libtnb/sqlite"
	"go.uber.org/goleak"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/gormtx"
	"github.com/mqlite/mqlite/outbox"
)

// TestMain checks for leaked goroutines, but GORM's own in prepared-
// statement mode: its statement cache starts a goroutine that nothing can
// stop (gorm.io/gorm/internal/lru says so: its done channel is never
// closed).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

// Order is the business row of the tests.
type Order struct {
	ID   int64 `gorm:"primaryKey"`
	Item string
}

var errRollback = errors.New("roll back")

// place writes an order with gtx and its event on gormtx.SQLTx(gtx).
func place(t *testing.T, gtx *gorm.DB, item string) error {
	t.Helper()
	if err := gtx.Create(&Order{Item: item}).Error; err != nil {
		return err
	}
	tx, err := gormtx.SQLTx(gtx)
	if err != nil {
		return err
	}
	_, err = outbox.SendOne(gtx.Statement.Context, tx, "orders", outbox.Message{Body: []byte(item), MessageID: item})
	return err
}

func TestSQLTx(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run places orders on db; want are the items whose order and
		// event both exist afterwards (the others have neither).
		run  func(t *testing.T, db *gorm.DB) error
		want []string
	}{
		{"commit", func(t *testing.T, db *gorm.DB) error {
			return db.Transaction(func(gtx *gorm.DB) error { return place(t, gtx, "book") })
		}, []string{"book"}},
		{"rollback", func(t *testing.T, db *gorm.DB) error {
			err := db.Transaction(func(gtx *gorm.DB) error {
				if err := place(t, gtx, "book"); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				return err
			}
			return nil
		}, nil},
		{"nested savepoint rolled back", func(t *testing.T, db *gorm.DB) error {
			return db.Transaction(func(gtx *gorm.DB) error {
				if err := place(t, gtx, "book"); err != nil {
					return err
				}
				err := gtx.Transaction(func(inner *gorm.DB) error {
					if err := place(t, inner, "lamp"); err != nil {
						return err
					}
					return errRollback // back to the savepoint: lamp's row and event go
				})
				if !errors.Is(err, errRollback) {
					return err
				}
				return gtx.Transaction(func(inner *gorm.DB) error { return place(t, inner, "tea") })
			})
		}, []string{"book", "tea"}},
		{"begin and commit", func(t *testing.T, db *gorm.DB) error {
			gtx := db.Begin()
			if err := place(t, gtx, "book"); err != nil {
				gtx.Rollback()
				return err
			}
			return gtx.Commit().Error
		}, []string{"book"}},
	}
	for _, prepared := range []bool{false, true} {
		for _, tc := range tests {
			name := tc.name
			if prepared {
				name = "prepared/" + name
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				st, db := open(t, prepared)
				if err := tc.run(t, db.WithContext(context.Background())); err != nil {
					t.Fatal(err)
				}
				var orders []string
				if err := db.Model(&Order{}).Order("item").Pluck("item", &orders).Error; err != nil {
					t.Fatal(err)
				}
				msgs, err := st.Peek(context.Background(), "orders", mqlite.PeekParams{})
				if err != nil {
					t.Fatal(err)
				}
				var events []string
				for _, m := range msgs {
					events = append(events, string(m.Body))
				}
				if !slices.Equal(orders, tc.want) || !slices.Equal(events, tc.want) {
					t.Errorf("orders %v and events %v, want %v for both", orders, events, tc.want)
				}
			})
		}
	}
}

// TestSQLTxOutsideATransaction: the handle itself, or a session, is no
// transaction.
func TestSQLTxOutsideATransaction(t *testing.T) {
	t.Parallel()
	for _, prepared := range []bool{false, true} {
		_, db := open(t, prepared)
		for _, gdb := range []*gorm.DB{db, db.Session(&gorm.Session{}), nil} {
			_, err := gormtx.SQLTx(gdb)
			if !errors.Is(err, gormtx.ErrNotATransaction) || !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Errorf("prepared %v: %v, want ErrNotATransaction and ErrInvalidArgument", prepared, err)
			}
		}
	}
}

// open makes a store with the queue orders and GORM on its handle.
func open(t *testing.T, prepared bool) (*mqlite.Store, *gorm.DB) {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "app.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(sqlite.New(sqlite.Config{Conn: st.DB()}), &gorm.Config{
		Logger: logger.Discard, PrepareStmt: prepared, SkipDefaultTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	return st, db
}

// TestGroupedNestedTransactions runs GORM nested transactions (savepoints
// of GORM's own) inside callers of Store.Tx that share group commits: each
// caller's inner transaction rolled back leaves nothing, the one committed
// stays with the caller's, and a caller that fails loses its rows and
// messages alone.
func TestGroupedNestedTransactions(t *testing.T) {
	for _, prepared := range []bool{false, true} {
		st, db := open(t, prepared)
		ctx := context.Background()
		const callers = 8
		hold, queued := make(chan struct{}), make(chan struct{}, callers)
		errs := make(chan error, callers+1)
		call := func(i int) error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error {
				gtx := db.WithContext(tx.Context())
				gtx.Statement.ConnPool = tx.SQL() // GORM on the group's transaction: Transaction nests as savepoints
				if i == 0 {
					<-hold // the others queue behind this one meanwhile
				}
				item := fmt.Sprint("item", i)
				if err := place(t, gtx, item); err != nil {
					return err
				}
				err := gtx.Transaction(func(inner *gorm.DB) error {
					if err := inner.Create(&Order{Item: item + "-lost"}).Error; err != nil {
						return err
					}
					return errRollback
				})
				if !errors.Is(err, errRollback) {
					return fmt.Errorf("inner transaction: %v", err)
				}
				if err := gtx.Transaction(func(inner *gorm.DB) error { return inner.Create(&Order{Item: item + "-kept"}).Error }); err != nil {
					return err
				}
				if i%2 == 1 {
					return errRollback
				}
				return nil
			})
		}
		var wg sync.WaitGroup
		for i := range callers + 1 {
			wg.Go(func() {
				if i > 0 {
					queued <- struct{}{}
				}
				err := call(i)
				if i%2 == 1 && errors.Is(err, errRollback) {
					err = nil
				}
				errs <- err
			})
		}
		for range callers {
			<-queued
		}
		close(hold)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("prepared %v: %v", prepared, err)
			}
		}
		var items []string
		if err := db.Model(&Order{}).Order("item").Pluck("item", &items).Error; err != nil {
			t.Fatal(err)
		}
		var want []string
		for i := 0; i <= callers; i += 2 {
			want = append(want, fmt.Sprint("item", i), fmt.Sprint("item", i, "-kept"))
		}
		slices.Sort(want)
		if !slices.Equal(items, want) {
			t.Errorf("prepared %v: orders %q, want %q", prepared, items, want)
		}
		var msgs int64
		if err := db.Table("mqlite_messages").Count(&msgs).Error; err != nil {
			t.Fatal(err)
		}
		if msgs != int64(len(want)/2) {
			t.Errorf("prepared %v: %d messages, want %d", prepared, msgs, len(want)/2)
		}
	}
}
