// Command sqlx is mqlite's sqlx example: an order service whose orders and
// their order.placed events commit in one *sqlx.Tx on the store's own
// connection, and a consumer.Loop that handles the events idempotently.
//
//	go run ./examples/sqlx
//
// It places four orders in a fresh store (one is out of stock and leaves
// neither an order row nor an event), handles their events, prints what
// happened and exits.
package main

import (
	"context"
	"io"
	"os"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/examples/internal/shop"
)

func main() {
	os.Exit(shop.Main("sqlx", run))
}

// run is the example on a new store at path, writing to w.
func run(ctx context.Context, w io.Writer, path string) error {
	return shop.Demo(ctx, w, path, func(ctx context.Context, st *mqlite.Store, out io.Writer) (shop.Service, error) {
		return NewService(ctx, st, out)
	}, nil)
}
