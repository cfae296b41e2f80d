package driver

import (
	"database/sql"
	"reflect"
	"unsafe"
)

// handleOffsets are the offsets of the *sql.DB field (named db) inside
// sql.Tx and sql.Conn, found once by reflection; -1 when a Go release
// renamed or retyped it, and HandleOf then answers nil for them.
var txHandle, connHandle = handleOffset(reflect.TypeFor[sql.Tx]()), handleOffset(reflect.TypeFor[sql.Conn]())

func handleOffset(t reflect.Type) uintptr {
	f, ok := t.FieldByName("db")
	if !ok || f.Type != reflect.TypeFor[*sql.DB]() {
		return ^uintptr(0)
	}
	return f.Offset
}

// sqlTx is what HandleOf finds inside a wrapper of a *sql.Tx (sqlx.Tx,
// GORM's pool, an application's own type): an exported embedded *sql.Tx.
var sqlTxType = reflect.TypeFor[*sql.Tx]()

// HandleOf returns the *sql.DB that db runs on: db itself, the handle of a
// *sql.Tx or *sql.Conn, or of the *sql.Tx a struct embeds (sqlx.Tx); nil
// when it cannot tell. It reads database/sql's own field, the one way to
// learn a transaction's handle without a statement; TestHandleOf pins it.
func HandleOf(db DBTX) *sql.DB {
	switch v := db.(type) {
	case *sql.DB:
		return v
	case *sql.Tx:
		if v == nil || txHandle == ^uintptr(0) {
			return nil
		}
		return *(**sql.DB)(unsafe.Add(unsafe.Pointer(v), txHandle))
	case *sql.Conn:
		if v == nil || connHandle == ^uintptr(0) {
			return nil
		}
		return *(**sql.DB)(unsafe.Add(unsafe.Pointer(v), connHandle))
	}
	if tx := embeddedTx(db); tx != nil {
		return HandleOf(tx)
	}
	return nil
}

// embeddedTx returns the *sql.Tx that db, a pointer to a struct, embeds as
// an exported field (sqlx.Tx), or nil.
func embeddedTx(db DBTX) *sql.Tx {
	rv := reflect.ValueOf(db)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return nil
	}
	s := rv.Elem()
	for i := range s.NumField() {
		f := s.Type().Field(i)
		if f.Anonymous && f.IsExported() && f.Type == sqlTxType {
			if tx, _ := s.Field(i).Interface().(*sql.Tx); tx != nil {
				return tx
			}
		}
	}
	return nil
}
