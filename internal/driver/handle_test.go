package driver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"testing"

	mqdriver "github.com/mqlite/mqlite/internal/driver"
)

// nullDriver is a database/sql driver that does nothing, enough to begin
// transactions and take connections.
type nullDriver struct{}

func (nullDriver) Open(string) (driver.Conn, error) { return nullConn{}, nil }

type nullConn struct{}

func (nullConn) Prepare(string) (driver.Stmt, error) { return nil, io.EOF }
func (nullConn) Close() error                        { return nil }
func (nullConn) Begin() (driver.Tx, error)           { return nullConn{}, nil }
func (nullConn) Commit() error                       { return nil }
func (nullConn) Rollback() error                     { return nil }

func init() { sql.Register("mqlite-null", nullDriver{}) }

type wrapped struct{ *sql.Tx }

// TestHandleOf pins what HandleOf reads of database/sql: the handle of a
// transaction, of a connection and of a struct that embeds a transaction,
// and nil for what it cannot tell.
func TestHandleOf(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("mqlite-null", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, c := range map[string]struct {
		in   mqdriver.DBTX
		want *sql.DB
	}{
		"db": {db, db}, "tx": {tx, db}, "conn": {conn, db}, "embedded": {&wrapped{tx}, db},
		"nil tx": {(*sql.Tx)(nil), nil}, "other": {&struct{ mqdriver.DBTX }{tx}, nil},
	} {
		if got := mqdriver.HandleOf(c.in); got != c.want {
			t.Errorf("%s: HandleOf = %p, want %p", name, got, c.want)
		}
	}
}

// TestConnOf pins what ConnOf reads of database/sql: the driver connection
// of a transaction, of a connection and of a struct that embeds a
// transaction, none for a handle, an ended transaction or what it cannot
// tell. When a Go release moves sql.Tx's or driverConn's fields, this
// fails: the PostgreSQL engine would then lose which transaction a report
// belongs to.
func TestConnOf(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("mqlite-counted", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(3)
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c1, c2, c3 := mqdriver.ConnOf(tx1), mqdriver.ConnOf(tx2), mqdriver.ConnOf(conn)
	for name, c := range map[string]driver.Conn{"tx1": c1, "tx2": c2, "conn": c3} {
		if _, ok := c.(*countedConn); !ok {
			t.Fatalf("ConnOf(%s) = %#v, want the driver's connection (database/sql's layout changed?)", name, c)
		}
	}
	if c1 == c2 || c1 == c3 || c2 == c3 {
		t.Errorf("ConnOf gave one connection twice: %p %p %p", c1, c2, c3)
	}
	if got := mqdriver.ConnOf(&wrapped{tx1}); got != c1 {
		t.Errorf("ConnOf(embedded) = %p, want %p", got, c1)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]mqdriver.DBTX{"db": db, "ended tx": tx2, "nil tx": (*sql.Tx)(nil), "other": &struct{ mqdriver.DBTX }{tx1}} {
		if got := mqdriver.ConnOf(in); got != nil {
			t.Errorf("ConnOf(%s) = %#v, want nil", name, got)
		}
	}
}

// countedConn is a connection of the mqlite-counted driver: a distinct
// value per connection opened.
type countedConn struct {
	nullConn
	n int
}

type countedDriver struct{ opened *int }

func (d countedDriver) Open(string) (driver.Conn, error) {
	*d.opened++
	return &countedConn{n: *d.opened}, nil
}

func (c *countedConn) Begin() (driver.Tx, error) { return nullConn{}, nil }

func init() { sql.Register("mqlite-counted", countedDriver{opened: new(int)}) }
