package driver

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"reflect"
	"unsafe"
)

// TxKey names the connection a transaction's reports come from
// (ConnConfig's Commit, Rollback, Changed, Created, Dropped, Settling): a
// connection runs one transaction at a time, so the store keeps what a
// transaction reported, until its commit or rollback, apart from what the
// transactions beside it (other connections of a pool) report. An engine
// with one connection (SQLite) reports every transaction as TxKey 0.
type TxKey uint64

// The offsets of the *sql.driverConn field (named dc) inside sql.Tx, and of
// the driver.Conn field (named ci) inside the driverConn, found once by
// reflection; ^0 when a Go release renamed or retyped either, and ConnOf
// then answers nil for a transaction (TestConnOf fails loudly).
var txConnField, connDriverField = connFields()

func connFields() (uintptr, uintptr) {
	none := ^uintptr(0)
	dc, ok := reflect.TypeFor[sql.Tx]().FieldByName("dc")
	if !ok || dc.Type.Kind() != reflect.Pointer || dc.Type.Elem().Kind() != reflect.Struct {
		return none, none
	}
	ci, ok := dc.Type.Elem().FieldByName("ci")
	if !ok || ci.Type != reflect.TypeFor[sqldriver.Conn]() {
		return none, none
	}
	return dc.Offset, ci.Offset
}

// ConnOf returns the driver connection db's statements run on: that of a
// *sql.Tx (or of the *sql.Tx a struct embeds, sqlx.Tx), or of a
// *sql.Conn; nil for a *sql.DB, whose statements run on whichever
// connection of its pool is free, and for what it cannot tell (a
// transaction already ended). A *sql.Conn is asked through Raw; a *sql.Tx
// has no such method, so ConnOf reads database/sql's own fields, as
// HandleOf does: the one way to learn a transaction's connection without
// a statement. TestConnOf pins it.
func ConnOf(db DBTX) sqldriver.Conn {
	switch v := db.(type) {
	case *sql.DB:
		return nil
	case *sql.Tx:
		return txConn(v)
	case *sql.Conn:
		if v == nil {
			return nil
		}
		var c sqldriver.Conn
		_ = v.Raw(func(dc any) error { c, _ = dc.(sqldriver.Conn); return nil })
		return c
	}
	if tx := embeddedTx(db); tx != nil {
		return txConn(tx)
	}
	return nil
}

// txConn reads the driver connection of tx, nil once tx has ended.
func txConn(tx *sql.Tx) sqldriver.Conn {
	if tx == nil || txConnField == ^uintptr(0) {
		return nil
	}
	dc := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(tx), txConnField))
	if dc == nil {
		return nil
	}
	return *(*sqldriver.Conn)(unsafe.Add(dc, connDriverField))
}

// Keyed is a driver connection that knows its TxKey (the PostgreSQL
// engine's).
type Keyed interface{ TxKey() TxKey }

// KeyOf returns the TxKey of the connection db's statements run on
// (ConnOf), and false when db is a handle or its connection has no key.
func KeyOf(db DBTX) (TxKey, bool) {
	if k, ok := ConnOf(db).(Keyed); ok {
		return k.TxKey(), true
	}
	return 0, false
}
