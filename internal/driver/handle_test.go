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
