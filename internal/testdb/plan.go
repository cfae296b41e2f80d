package testdb

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// Plan returns the EXPLAIN QUERY PLAN details of query, one line each, with
// "COVERING INDEX" folded into "INDEX" (a covering index is still the index
// a test pins). It fails the test on error.
func Plan(t testing.TB, db interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatalf("explain: %v", err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return strings.ReplaceAll(strings.Join(lines, "\n"), "COVERING INDEX", "INDEX")
}
