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
// runs transactions side by side: each report carries the key of the
// connection its statement ran on (driver.TxKey), a connection runs one
// transaction at a time, and its commit or rollback reports that key, so
// the store applies or drops that transaction's records and no other's. A
// statement on the handle itself, in autocommit, is committed when it
// returns: its records go under a key of their own, applied at once
// (reporter.done).

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
// to db's own store (ownStore), if any, once the statement has succeeded,
// under key: that of the connection of db, a transaction or a connection
// (driver.ConnOf), or one of the statement's own when db is the handle and
// the statement runs in autocommit (auto).
type reporter struct {
	st   *store
	key  driver.TxKey
	auto bool
	op   driver.Op // what the statement does, told with each change (by)
}

// by returns r telling op, the settlement the statement runs (or
// driver.OpClaim), with each change it reports: on a pool the store cannot
// tell which transaction a tag of its own belongs to, so a statement that
// knows what it does says it.
func (r reporter) by(op driver.Op) reporter {
	r.op = op
	return r
}

// reporterOf returns the reporter of the statements on db: in autocommit
// on the handle, or on a connection taken from it (*sql.Conn) with no
// transaction open, under a key of the statement's own. A transaction
// whose connection it cannot learn (driver.ConnOf answers nil: a Go
// release moved database/sql's fields, which TestConnOf catches) reports
// nothing rather than under another transaction's key: the counts are then
// short until Metrics reads the tables again. A transaction begun by a
// statement (BEGIN on a *sql.Conn) is none database/sql knows: its end is
// not heard, and its records wait for the end of the connection's next
// transaction.
func reporterOf(db driver.DBTX) reporter {
	st := ownStore(db)
	if st == nil {
		return reporter{}
	}
	if _, ok := db.(*sql.DB); ok {
		return reporter{st: st, key: newKey(), auto: true}
	}
	c, ok := driver.ConnOf(db).(*conn)
	if !ok {
		return reporter{}
	}
	if _, ok := db.(*sql.Conn); ok && c.idle() {
		// A connection taken from the handle, outside any transaction: its
		// statement is in autocommit, as on the handle itself.
		return reporter{st: st, key: newKey(), auto: true}
	}
	return reporter{st: st, key: c.key}
}

// change reports one row of messages going from old to state as the
// pre-update hook does: a completed row has left its queue (New ""), a
// row that leaves the state alone or leaves a completed row is not
// reported. old is "" for a row inserted, state "" for one deleted; bytes
// is the row's body length.
func (r reporter) change(queue, old, state string, bytes int64) {
	r.report(driver.RowChange{Queue: queue, Old: old, New: state, Bytes: bytes})
}

// claimed is change for a row a claim handed out for the deliveries-th
// time: a redelivery when that is more than once.
func (r reporter) claimed(queue, old, state string, bytes, deliveries int64) {
	r.report(driver.RowChange{Queue: queue, Old: old, New: state, Bytes: bytes, Redelivered: deliveries > 1})
}

// report is change's and claimed's: c with the statement's op.
func (r reporter) report(c driver.RowChange) {
	if r.st == nil || r.st.cfg.Changed == nil {
		return
	}
	if c.New == stateCompleted {
		c.New = ""
	}
	if c.Old == stateCompleted || (c.Old == c.New && c.Old != "") {
		return
	}
	c.Op = r.op
	r.st.cfg.Changed(r.key, c)
}

// queue reports a queue created (created true) or dropped; in autocommit
// it is applied at once.
func (r reporter) queue(name string, created bool) {
	if r.st == nil {
		return
	}
	if created && r.st.cfg.Created != nil {
		r.st.cfg.Created(r.key, name)
	}
	if !created && r.st.cfg.Dropped != nil {
		r.st.cfg.Dropped(r.key, name)
	}
	r.done()
}

// settling reports a settlement of the delivery (queue, seq, token) about
// to run in db's transaction (ConnConfig.Settling), which the store acts
// on when that transaction commits. A settlement in autocommit is no
// transaction's: the store's own call that runs it tells its registry
// itself, so it is not reported.
func (r reporter) settling(op driver.Op, queue string, seq int64, token string) {
	if r.st == nil || r.auto || r.st.cfg.Settling == nil {
		return
	}
	r.st.cfg.Settling(r.key, op, queue, seq, token)
}

// done ends a statement: one that ran on the handle itself, outside any
// transaction, PostgreSQL committed on its own when it returned, so the
// records it reported under its own key are applied at once
// (ConnConfig.Commit of that key), as the SQLite engine's commit hook
// fires for a statement in autocommit. A statement in a transaction waits
// for that transaction's end, which hookTx reports. Every statement that
// reports changes calls done once it has reported them all.
func (r reporter) done() {
	if r.st == nil || !r.auto {
		return
	}
	if r.st.cfg.Commit != nil {
		r.st.cfg.Commit(r.key)
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
