package outbox_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jmoiron/sqlx"
	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// With database/sql alone: begin the transaction on Store.DB() (the
// store's one connection), write the business row and the message on it,
// and commit. A rollback would leave neither.
func Example_databaseSQL() {
	ctx := context.Background()
	st, done := openExample(ctx)
	defer done()

	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES (?)`, "lamp"); err != nil {
		log.Fatal(err)
	}
	seq, err := outbox.SendOne(ctx, tx, "orders", outbox.Message{Body: []byte(`{"item":"lamp"}`)})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order and event committed, event seq", seq)
	// Output: order and event committed, event seq 1
}

// With sqlx: wrap Store.DB() (do not close the wrapper: it is the store's
// connection) and pass the *sqlx.Tx itself. A rolled-back transaction
// leaves neither the order nor its event.
func Example_sqlx() {
	ctx := context.Background()
	st, done := openExample(ctx)
	defer done()
	db := sqlx.NewDb(st.DB(), "sqlite")

	place := func(item string, commit bool) {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES (?)`, item); err != nil {
			log.Fatal(err)
		}
		if _, err := outbox.SendOne(ctx, tx, "orders", outbox.Message{Body: []byte(item)}); err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				log.Fatal(err)
			}
		}
	}
	place("chair", true)
	place("table", false) // rolled back by the deferred Rollback

	var items []string
	if err := db.SelectContext(ctx, &items, `SELECT item FROM orders ORDER BY id`); err != nil {
		log.Fatal(err)
	}
	events, err := st.Peek(ctx, "orders", mqlite.PeekParams{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", items)
	fmt.Println("events:", len(events), string(events[0].Body))
	// Output:
	// orders: [chair]
	// events: 1 chair
}
