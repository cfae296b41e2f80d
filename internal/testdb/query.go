package testdb

import (
	"context"
	"database/sql"
	"testing"
)

// Querier is a *sql.DB, *sql.Tx or *sql.Conn.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Int runs query, which must return one integer, and fails the test on
// error. Tests use it to count rows: Int(t, db, `SELECT count(*) FROM mqlite_dedup`).
func Int(t testing.TB, q Querier, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
