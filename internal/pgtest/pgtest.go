// Package pgtest holds the test helpers of the PostgreSQL engine: a fresh,
// empty schema (URL) or database (Database) per test on the shared server,
// and a server of the
// test's own, which the test may kill and restart (StartCluster). Library
// code never imports it, and it imports no package of the repository, so
// the engine's own tests can use it without a cycle.
//
// Both skip the test when PostgreSQL is not there (no server answers, no
// initdb), except under MQLITE_REQUIRE_SERVICES=1, where they fail it: CI
// runs every test, a developer's machine runs what it has.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultAdminURL is the shared server AdminURL names when MQLITE_PG_URL
// is not set: a local PostgreSQL that trusts the postgres role.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// reachTimeout bounds the first connection to the shared server: a server
// that does not answer by then is taken as not there.
const reachTimeout = 2 * time.Second

// AdminURL returns the URL of the shared server's maintenance database:
// MQLITE_PG_URL when set, else DefaultAdminURL. Its role must be allowed
// to create and drop databases. Tests do not write into it; URL gives each
// test a database of its own on the same server.
func AdminURL() string {
	if u := os.Getenv("MQLITE_PG_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// Database returns the URL of a fresh, empty database on the shared server
// (AdminURL), made for t alone and dropped when t ends, whatever
// connections are still open to it. Its name is mqlite_t_ and random hex;
// it is copied from template0, so nothing a user added to template1 leaks
// in, and no session on template1 can make the copy fail (measured, the
// copy of either takes the same, about 20 ms, with PostgreSQL's default
// strategy, which is faster than FILE_COPY); its encoding is UTF8 and its
// collation C, the same on every machine.
//
// When no server answers (within a short timeout), Database skips t, or fails
// it under MQLITE_REQUIRE_SERVICES=1. It must be called from t's goroutine.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget(t, 30*time.Second))
	defer cancel()
	u, conn := dialAdmin(ctx, t)
	if conn == nil {
		return ""
	}
	defer func() { _ = conn.Close(context.Background()) }()

	name := "mqlite_t_" + randomHex(t, 8)
	// Each part is spelled out so that the server's own defaults, which
	// differ between machines, do not reach the tests.
	create := "CREATE DATABASE " + name + " TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("pgtest: create database %s on %s: %v", name, u.Redacted(), err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(AdminURL(), name); err != nil {
			t.Errorf("pgtest: drop database %s on %s: %v", name, u.Redacted(), err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// dialAdmin connects to the shared server's maintenance database
// (AdminURL) and returns its URL parsed and the connection; the
// connection is nil when no server answers, and t is then skipped, or
// failed under MQLITE_REQUIRE_SERVICES=1.
func dialAdmin(ctx context.Context, t testing.TB) (*url.URL, *pgx.Conn) {
	t.Helper()
	admin := AdminURL()
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("pgtest: the shared server's URL %q (MQLITE_PG_URL) is not a postgres:// URL", admin)
	}
	conn, err := connect(ctx, admin, reachTimeout)
	if err != nil {
		missingService(t, "PostgreSQL at "+u.Redacted(), err)
		return u, nil
	}
	return u, conn
}

// dropDatabase drops database name on the server of admin, closing the
// sessions still on it (a pool the test forgot to close must not keep
// the database behind).
func dropDatabase(admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connect(ctx, admin, 10*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// connect opens one connection to rawURL, giving up on the server after
// timeout (or when ctx ends, if sooner), and checks that it answers.
func connect(ctx context.Context, rawURL string, timeout time.Duration) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = timeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// randomHex returns n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random name: %v", err)
	}
	return hex.EncodeToString(b)
}

// missingService skips t because what is not available (why says how it
// failed), or fails t when MQLITE_REQUIRE_SERVICES=1. It is the rule of
// internal/testdb's MissingService, repeated here because this package
// imports nothing of the repository.
func missingService(t testing.TB, what string, why error) {
	t.Helper()
	if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s is required (MQLITE_REQUIRE_SERVICES=1) but unavailable: %v", what, why)
	}
	t.Skipf("%s unavailable: %v", what, why)
}

// waitBudget is how long a wait of t may last: limit, or less when t's
// deadline (go test -timeout) comes sooner, leaving a margin for t's
// cleanups and for the report of what failed.
func waitBudget(t testing.TB, limit time.Duration) time.Duration {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return limit
	}
	deadline, ok := d.Deadline()
	if !ok {
		return limit
	}
	left := time.Until(deadline) - 10*time.Second
	if left < time.Second {
		left = time.Second
	}
	return min(limit, left)
}

// SharedDatabase is the database of the shared server in which URL gives
// each test a schema of its own. It is made once, the first time a test
// needs it, and kept.
const SharedDatabase = "mqlite_tests"

// URL returns the URL of a fresh, empty place for a store on the shared
// server: a schema of its own (mqlite_t_ and random hex) in
// SharedDatabase, alone on the URL's search path, so that everything a
// store adds lands there and nothing else is visible; the schema is
// dropped with all it holds when t ends. A schema costs one transaction
// where a database costs a copy of a template and, to drop, a checkpoint:
// the conformance kit opens hundreds. Commits on it do not wait for the
// disk (synchronous_commit off): the tests that need durability start a
// server of their own (StartCluster). Use Database for a test that needs a
// whole database (a copy into an empty database, say).
//
// When no server answers, URL skips t, or fails it under
// MQLITE_REQUIRE_SERVICES=1. It must be called from t's goroutine.
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget(t, 30*time.Second))
	defer cancel()
	u, conn := dialAdmin(ctx, t)
	if conn == nil {
		return ""
	}
	create := "CREATE DATABASE " + SharedDatabase + " TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
	_, err := conn.Exec(ctx, create)
	_ = conn.Close(context.Background())
	if err != nil && !isDuplicate(err) {
		t.Fatalf("pgtest: create database %s on %s: %v", SharedDatabase, u.Redacted(), err)
	}
	u.Path = "/" + SharedDatabase
	shared := u.String()
	conn, err = connect(ctx, shared, reachTimeout)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", u.Redacted(), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	name := "mqlite_t_" + randomHex(t, 8)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema %s on %s: %v", name, u.Redacted(), err)
	}
	t.Cleanup(func() {
		if err := dropSchema(shared, name); err != nil {
			t.Errorf("pgtest: drop schema %s on %s: %v", name, u.Redacted(), err)
		}
	})
	q := u.Query()
	q.Set("search_path", name)
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String()
}

// isDuplicate reports a CREATE that found its object made already (by
// another test binary at the same moment): SQLSTATE 42P04, or 23505 when
// two creates of one database race in the catalog.
func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P04" || pe.Code == "23505")
}

// dropSchema drops the schema name of the database at shared with
// everything in it.
func dropSchema(shared, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connect(ctx, shared, 10*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	return err
}
