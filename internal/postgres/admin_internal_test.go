package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver of database/sql
)

// TestUniqueViolation: a duplicate key from the server, wrapped or not, is
// a unique violation; another server error, a client error and nil are
// not. The duplicate is made in a temporary table of one session, which
// the server drops with it.
func TestUniqueViolation(t *testing.T) {
	u := os.Getenv("MQLITE_PG_URL")
	if u == "" {
		u = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx := context.Background()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable: %v", err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `CREATE TEMP TABLE mqlite_unique_probe (k int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	_, dup := c.ExecContext(ctx, `INSERT INTO mqlite_unique_probe VALUES (1), (1)`)
	_, other := c.ExecContext(ctx, `INSERT INTO mqlite_unique_probe VALUES (NULL)`)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"duplicate key", dup, true},
		{"wrapped duplicate key", fmt.Errorf("create queue: %w", dup), true},
		{"not-null violation", other, false},
		{"client error", errors.New("23505"), false},
		{"nil", nil, false},
	} {
		if got := uniqueViolation(tc.err); got != tc.want {
			t.Errorf("%s (%v): uniqueViolation = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
