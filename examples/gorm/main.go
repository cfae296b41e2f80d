// Command gorm is mqlite's GORM example: an order service whose orders and
// their order.placed events commit in one GORM transaction on the store's
// own *sql.DB, and a consumer.Loop that handles the events idempotently.
//
//	go run -C examples/gorm .   # from the repository root
//
// It places four orders in a fresh store (one is out of stock and leaves
// neither an order row nor an event), shows that a GORM handle opened on the
// file by itself is refused (mqlite.ErrNotAStore), handles the events, prints
// what happened and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/examples/internal/shop"
)

func main() {
	os.Exit(shop.Main("gorm", run))
}

// run is the example on a new store at path, writing to w.
func run(ctx context.Context, w io.Writer, path string) error {
	return shop.Demo(ctx, w, path, func(ctx context.Context, st *mqlite.Store, out io.Writer) (shop.Service, error) {
		return NewService(ctx, st, out)
	}, wrongHandle)
}

// wrongHandle shows the mistake the outbox refuses: GORM opened on the
// store's file by itself (a second sql.Open) instead of on st.DB().
func wrongHandle(ctx context.Context, w io.Writer, st *mqlite.Store) (err error) {
	wrong, err := gorm.Open(sqlite.Open(st.Path()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("open a second handle: %w", err)
	}
	sqlDB, err := wrong.DB()
	if err != nil {
		return fmt.Errorf("open a second handle: %w", err)
	}
	defer func() { err = errors.Join(err, sqlDB.Close()) }()
	_, err = placeOrder(ctx, wrong, "book", 1, 1299)
	if !errors.Is(err, mqlite.ErrNotAStore) {
		return fmt.Errorf("an order on a second handle gave %v, want mqlite.ErrNotAStore", err)
	}
	fmt.Fprintf(w, "\nthe same order through gorm.Open(sqlite.Open(path)) instead of st.DB():\n  %v\n  (rolled back: nothing written)\n", err)
	return nil
}
