package testdb

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/mqlite/mqlite/internal/pgtest"
)

// Postgres makes a new, empty database on the test server
// (pgtest.Database: dropped with everything in it when the test ends) and
// returns its URL and a handle on it (database/sql's "pgx" driver).
// Without a server the test is skipped, unless MQLITE_REQUIRE_SERVICES=1.
func Postgres(t testing.TB) (string, *sql.DB) {
	t.Helper()
	u := pgtest.Database(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return u, db
}
