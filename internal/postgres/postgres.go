// Package postgres is mqlite's engine on PostgreSQL, through pgx v5: it
// implements driver.Driver with the layout of schema/postgres.sql. Where
// the SQLite engine has one writer, this one shares a database with any
// number of processes: claims take rows FOR UPDATE SKIP LOCKED, a grouped
// message is claimed only when its group has no earlier live member and
// none in flight, the sweeps are statements any instance may run at once,
// and a commit that leaves a message claimable notifies every process
// (LISTEN/NOTIFY on the channel mqlite_claimable). Times are epoch
// milliseconds from the store's clock, passed as parameters: no statement
// reads the database's clock.
package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// PostgreSQL is the engine on a PostgreSQL database.
type PostgreSQL struct{}

var _ driver.Driver = PostgreSQL{}

// Prepare has nothing to ready: PostgreSQL's settings are the database's.
func (PostgreSQL) Prepare(context.Context, *sql.DB, bool) error { return nil }

// Recover releases nothing: another process may hold the leases it finds,
// so a lease left by a process that died lapses at its end, and the
// reaper (or the next claim's probe) takes it back then.
func (PostgreSQL) Recover(context.Context, driver.DBTX, int64) (int64, error) { return 0, nil }

// Backup is refused: a PostgreSQL database is backed up by its own tools
// (pg_dump, base backups, point-in-time recovery).
func (PostgreSQL) Backup(context.Context, driver.DBTX, string) error {
	return fmt.Errorf("%w: back up a PostgreSQL store with pg_dump or the server's base backups", errs.ErrUnsupported)
}

// CheckpointEvery returns stop: PostgreSQL folds its log back by itself.
func (PostgreSQL) CheckpointEvery(_ context.Context, _ *sql.DB, _ int, stop func() bool) func() bool {
	if stop == nil {
		return func() bool { return false }
	}
	return stop
}

// Owns reports whether db is a handle on pgx: the store's own, or one the
// application opened with pgx's database/sql driver.
func (PostgreSQL) Owns(db *sql.DB) bool {
	_, ok := db.Driver().(*stdlib.Driver)
	return ok
}

// Shared is true: other processes write the same database.
func (PostgreSQL) Shared() bool { return true }
