package postgres_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/internal/postgres"
	"github.com/mqlite/mqlite/schema"
)

// pg is the engine under test.
var pg = postgres.PostgreSQL{}

// testClock is a clock the test moves.
type testClock struct{ ms atomic.Int64 }

func (c *testClock) now() int64 { return c.ms.Load() }

// urls are the URLs the handles of openTest are on, for a second handle on
// the same database (another process).
var urls sync.Map // *sql.DB → string

// openTest opens the engine on a new, empty database with the current
// layout (pgtest.URL) and returns the handle and the clock its statements
// read.
func openTest(t testing.TB) (*sql.DB, *testClock) {
	t.Helper()
	return openOn(t, pgtest.URL(t))
}

// openOn opens the engine on the database at url, applying the layout, as
// another store (another process) would.
func openOn(t testing.TB, url string) (*sql.DB, *testClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := &testClock{}
	clock.ms.Store(1_700_000_000_000)
	db, release, err := pg.Open(driver.ConnConfig{
		Path: url, StoreID: 1, MaxMessageBytes: 1 << 20,
		Now: clock.now, Closing: func() bool { return false },
	})
	if err != nil {
		t.Fatal(err)
	}
	urls.Store(db, url)
	t.Cleanup(func() { _ = db.Close(); release(); urls.Delete(db) })
	if err := schema.ApplyPostgres(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, clock
}

// openTwin opens one more handle on db's database with the same clock, as
// another process would; each of with changes its configuration first.
func openTwin(t testing.TB, db *sql.DB, clock *testClock, with ...func(*driver.ConnConfig)) *sql.DB {
	t.Helper()
	u, ok := urls.Load(db)
	if !ok {
		t.Fatal("openTwin: db was not opened by openTest")
	}
	cfg := driver.ConnConfig{Path: u.(string), StoreID: 2, MaxMessageBytes: 1 << 20,
		Now: clock.now, Closing: func() bool { return false }}
	for _, f := range with {
		f(&cfg)
	}
	twin, release, err := pg.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = twin.Close(); release() })
	return twin
}

func TestOpenAppliesTheLayout(t *testing.T) {
	db, _ := openTest(t)
	state, err := schema.CheckPostgres(context.Background(), db)
	if err != nil || state != schema.Current {
		t.Fatalf("CheckPostgres = %v, %v; want Current", state, err)
	}
}
