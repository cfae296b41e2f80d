// Package gormtx gives the *sql.Tx under a GORM transaction, for the
// outbox: orders written with GORM and their events sent with
// outbox.SendOne commit together.
//
//	gdb, _ := gorm.Open(sqlite.New(sqlite.Config{Conn: st.DB()}), &gorm.Config{})
//	err := gdb.WithContext(ctx).Transaction(func(gtx *gorm.DB) error {
//		if err := gtx.Create(&order).Error; err != nil {
//			return err
//		}
//		tx, err := gormtx.SQLTx(gtx)
//		if err != nil {
//			return err
//		}
//		_, err = outbox.SendOne(gtx.Statement.Context, tx, "orders", msg)
//		return err
//	})
//
// It is a module of its own, so that GORM stays out of mqlite's go.mod, and
// the one place that knows how GORM holds a transaction: its tests run it
// in GORM's default mode, in prepared-statement mode (PrepareStmt) and
// inside nested transactions (savepoints), so a GORM upgrade that changes
// that fails here rather than in an application.
package gormtx

import (
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/mqlite/mqlite"
)

// ErrNotATransaction is the error of SQLTx given a *gorm.DB that is not in
// a transaction (the handle itself, or a session outside Transaction and
// Begin). It matches mqlite.ErrInvalidArgument too.
var ErrNotATransaction = errors.New("gormtx: not a GORM transaction")

// SQLTx returns the *sql.Tx of the GORM transaction gtx: the gtx of
// db.Transaction (at any depth of nesting: a nested transaction is a
// savepoint of the same *sql.Tx) or of db.Begin, in GORM's default mode or
// in prepared-statement mode. Statements sent on it are part of gtx's
// transaction and commit or roll back with it. A gtx that is not in a
// transaction is ErrNotATransaction. SQLTx only reads gtx; it is safe to
// call from the goroutine that owns gtx.
func SQLTx(gtx *gorm.DB) (*sql.Tx, error) {
	if gtx == nil || gtx.Statement == nil {
		return nil, notATx("a nil *gorm.DB")
	}
	pool := gtx.Statement.ConnPool
	// PreparedStmtTX wraps the transaction in prepared-statement mode; a
	// wrapper of a wrapper is not expected, but unwrapping a few levels
	// costs nothing.
	for range 4 {
		switch p := pool.(type) {
		case *sql.Tx:
			if p == nil {
				return nil, notATx("a nil *sql.Tx")
			}
			return p, nil
		case *gorm.PreparedStmtTX:
			pool = p.Tx
		default:
			return nil, notATx(fmt.Sprintf("its connection pool is a %T", pool))
		}
	}
	return nil, notATx(fmt.Sprintf("its connection pool is a %T", pool))
}

func notATx(detail string) error {
	return fmt.Errorf("%w (%w): %s; call SQLTx inside db.Transaction or on db.Begin()", ErrNotATransaction, mqlite.ErrInvalidArgument, detail)
}
