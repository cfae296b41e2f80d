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

// Strings runs query, which must return one text column, and returns its
// rows in order, failing the test on error.
func Strings(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
