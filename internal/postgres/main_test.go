package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/postgres"
	"github.com/mqlite/mqlite/schema"
)

// pg is the engine under test.
var pg = postgres.PostgreSQL{}

// adminURL is the server the tests make their databases on.
func adminURL() string {
	if u := os.Getenv("MQLITE_PG_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// testClock is a clock the test moves.
type testClock struct{ ms atomic.Int64 }

func (c *testClock) now() int64 { return c.ms.Load() }

// openTest opens the engine on a new, empty database with the current
// layout and returns the handle and the clock its statements read. The
// database is dropped when the test ends. Without a server the test is
// skipped, unless MQLITE_REQUIRE_SERVICES=1.
func openTest(t testing.TB) (*sql.DB, *testClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL())
	if err != nil {
		if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable: %v", err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "mqlite_t_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), adminURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(adminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	clock := &testClock{}
	clock.ms.Store(1_700_000_000_000)
	db, release, err := pg.Open(driver.ConnConfig{
		Path: u.String(), StoreID: 1, MaxMessageBytes: 1 << 20,
		Now: clock.now, Closing: func() bool { return false },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.ApplyPostgres(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, clock
}

func TestOpenAppliesTheLayout(t *testing.T) {
	db, _ := openTest(t)
	state, err := schema.CheckPostgres(context.Background(), db)
	if err != nil || state != schema.Current {
		t.Fatalf("CheckPostgres = %v, %v; want Current", state, err)
	}
}
