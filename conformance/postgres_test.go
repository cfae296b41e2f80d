package conformance_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the application's own pgx handle
	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/conformance"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// onPostgres is the kit's embedded harness on a new PostgreSQL database
// per subtest (internal/pgtest: skipped without a server, failed under
// MQLITE_REQUIRE_SERVICES=1).
func onPostgres(tx func(st *mqlite.Store) txFunc, fx func(st *mqlite.Store) effectsFunc) conformance.Harness {
	h := embeddedOn(func(t *testing.T) string { return pgtest.URL(t) }, tx, fx)
	h.Features.WithoutBubble = "a PostgreSQL store does network I/O, which a synctest bubble cannot hold"
	h.Features.WithoutReleaseAtOpen = "on PostgreSQL other processes may hold leases: a dead process's lapse at their end"
	return h
}

// TestConformancePostgres runs the whole kit against a store on
// PostgreSQL, sending through Store.Tx.
func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	conformance.Run(t, onPostgres(viaStoreTx, effectsViaStoreTx))
}

// viaAppPool sends with outbox.SendBatch in a transaction of the
// application's own pgx handle (sql.Open("pgx", url)), not the store's:
// on PostgreSQL any connection to the database carries the outbox.
func viaAppPool(url string) func(st *mqlite.Store) txFunc {
	return func(st *mqlite.Store) txFunc {
		return func(ctx context.Context, fn func(conformance.SendFunc) error) error {
			db, err := sql.Open("pgx", url)
			if err != nil {
				return err
			}
			defer db.Close()
			x := sqlx.NewDb(db, "pgx")
			tx, err := x.BeginTxx(ctx, nil)
			if err != nil {
				return err
			}
			err = fn(func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
				return outbox.SendBatch(ctx, tx, queue, msgs)
			})
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	}
}

// TestConformancePostgresAppPool runs the kit's sending subtests that need
// no fake clock against a store on PostgreSQL, sending through sqlx on the
// application's own pgx handle.
func TestConformancePostgresAppPool(t *testing.T) {
	t.Parallel()
	h := conformance.Harness{Features: conformance.Features{WithoutBubble: "network I/O"}}
	h.Open = func(t *testing.T, cfg conformance.Config) conformance.Instance {
		// A send on a handle of no store reads the clock of the process's
		// one PostgreSQL store, or the wall clock when several are open, as
		// they are while the kit's subtests run in parallel: the sending
		// areas that read the fake clock (de-duplication windows, the
		// moments a commit keeps) run in TestConformancePostgres instead.
		switch area(t) {
		case "Transaction", "Wake", "Topics":
		default:
			t.Skip("the application's pool runs the sending subtests that need no fake clock; TestConformancePostgres runs the rest")
		}
		if t.Name() == "TestConformancePostgresAppPool/Transaction/CommitKeepsEveryField" {
			t.Skip("the kit's fake clock does not reach the application's own handle while several stores are open")
		}
		url := pgtest.URL(t)
		return embeddedOn(func(*testing.T) string { return url }, viaAppPool(url), effectsViaStoreTx).Open(t, cfg)
	}
	conformance.Run(t, h)
}
