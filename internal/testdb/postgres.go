package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// PostgresAdminURL is the PostgreSQL server the tests make their
// databases on: MQLITE_PG_URL, or the one on 127.0.0.1:5432.
func PostgresAdminURL() string {
	if u := os.Getenv("MQLITE_PG_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Postgres makes a new, empty database on the test server, dropped with
// everything in it when the test ends, and returns its URL and a handle on
// it (database/sql's "pgx" driver). Without a server the test is skipped,
// unless MQLITE_REQUIRE_SERVICES=1 (MissingService).
func Postgres(t testing.TB) (string, *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", PostgresAdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		MissingService(t, "PostgreSQL", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "mqlite_t_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := sql.Open("pgx", PostgresAdminURL()); err == nil {
			_, _ = c.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			_ = c.Close()
		}
	})
	u, err := url.Parse(PostgresAdminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return u.String(), db
}
