package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
)

// The store's counts (ConnConfig.Changed, Created, Dropped): the SQLite
// engine's pre-update hook reports every row of messages that changes
// state and every queue created or dropped; here each statement that
// changes them returns what it changed (RETURNING) and reports it the
// same way. Only a statement on the store's own handle reports: a
// transaction on the application's own pool never reports its commit or
// its rollback to the store, so its writes must not reach its counts
// (the store's Stats reads them from the tables instead). Each row is
// reported after its statement succeeded, before its transaction ends:
// the store applies the changes at the commit it hears next and drops
// them at a rollback, as with the SQLite engine's hooks. The store's pool
// runs transactions side by side, which that tally keeps apart by
// nothing: a rollback beside a commit may drop the other's changes.

// ownStore returns the store whose own handle db is (the handle itself, a
// transaction or a connection on it), nil for any other handle.
func ownStore(db driver.DBTX) *store {
	h := driver.HandleOf(db)
	if h == nil {
		return nil
	}
	if v, ok := stores.Load(h); ok {
		return v.(*store)
	}
	return nil
}

// reporter collects the changes of one statement on db and reports them
// to db's own store (ownStore), if any, once the statement has succeeded.
type reporter struct {
	st *store
	db driver.DBTX
}

// reporterOf returns the reporter of the statements on db.
func reporterOf(db driver.DBTX) reporter {
	st := ownStore(db)
	if st != nil && st.cfg.Changed == nil && st.cfg.Created == nil && st.cfg.Dropped == nil {
		st = nil
	}
	return reporter{st: st, db: db}
}

// change reports one row of messages going from old to state as the
// pre-update hook does: a completed row has left its queue (New ""), a
// row that leaves the state alone or leaves a completed row is not
// reported. old is "" for a row inserted, state "" for one deleted; bytes
// is the row's body length.
func (r reporter) change(queue, old, state string, bytes int64) {
	if r.st == nil || r.st.cfg.Changed == nil {
		return
	}
	if state == stateCompleted {
		state = ""
	}
	if old == stateCompleted || (old == state && old != "") {
		return
	}
	r.st.cfg.Changed(driver.RowChange{Queue: queue, Old: old, New: state, Bytes: bytes})
}

// queue reports a queue created (created true) or dropped.
func (r reporter) queue(name string, created bool) {
	if r.st == nil {
		return
	}
	if created && r.st.cfg.Created != nil {
		r.st.cfg.Created(name)
	}
	if !created && r.st.cfg.Dropped != nil {
		r.st.cfg.Dropped(name)
	}
}

// done ends a statement that ran on the handle itself, outside any
// transaction: PostgreSQL committed it on its own, which the store hears
// as a commit (ConnConfig.Commit), as the SQLite engine's commit hook
// fires for a statement in autocommit.
func (r reporter) done() {
	if r.st == nil {
		return
	}
	if _, ok := r.db.(*sql.DB); ok && r.st.cfg.Commit != nil {
		r.st.cfg.Commit()
	}
}

// movedColumns is what a statement that changes rows of messages returns
// for moved: each row's queue, state before, state after (SQL
// expressions over the statement's own names), and body length.
func movedColumns(queue, old, state, bytes string) string {
	return ` RETURNING ` + queue + `, ` + old + `, ` + state + `, coalesce(` + bytes + `, 0)`
}

// moved runs query, which returns movedColumns, reports each row to db's
// store, and returns how many rows it returned; op names it in an error.
func moved(ctx context.Context, db driver.DBTX, op, query string, args ...any) (int64, error) {
	n, err := movedRows(ctx, db, query, args...)
	if err != nil {
		return n, fmt.Errorf("%s: %w", op, err)
	}
	return n, nil
}

// movedRows is moved with its errors as they come.
func movedRows(ctx context.Context, db driver.DBTX, query string, args ...any) (int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	type row struct {
		queue, old, state string
		bytes             int64
	}
	var got []row
	for rows.Next() {
		var r row
		var old, state sql.NullString
		if err := rows.Scan(&r.queue, &old, &state, &r.bytes); err != nil {
			rows.Close()
			return 0, err
		}
		r.old, r.state = old.String, state.String
		got = append(got, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	rep := reporterOf(db)
	for _, r := range got {
		rep.change(r.queue, r.old, r.state, r.bytes)
	}
	if len(got) > 0 {
		rep.done()
	}
	return int64(len(got)), nil
}
