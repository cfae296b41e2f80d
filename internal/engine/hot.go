package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// The hot path: the statements every message runs (a send, a claim, a
// settlement, a renewal) run on the store's connection through the driver
// directly when they run in a transaction open on it, whoever opened it
// (a group commit of Store.Tx, or the application's own on st.DB()). Each
// is prepared once per connection, kept out of the LRU cache under a small
// number rather than its text, and executed with the driver's argument
// slice reused: no database/sql lock, argument conversion, Rows or Row per
// statement, and no lookup of a statement by hashing its text. Statement
// order and transaction semantics are unchanged: the statement runs in the
// transaction the caller passed, on the connection that transaction holds,
// serialized with every other statement of the connection by the
// connection's own lock (cachingConn.run). Anything else (a *sql.DB, a
// *sql.Conn, a transaction of another driver, or one already ended) goes
// through database/sql as before, which gives it the same answer it always
// did.

// hotQuery is one statement of the hot path: its text and its slot in
// every connection's table of hot statements.
type hotQuery struct {
	text string
	slot int
}

// hotQueries counts the slots given out; the statements are package-level
// values, made at initialization.
var hotQueries int

// hot returns the hot statement of text. It is called at initialization
// only.
func hot(text string) *hotQuery {
	q := &hotQuery{text: text, slot: hotQueries}
	hotQueries++
	return q
}

// The transactions of the store's connection: BEGIN IMMEDIATE for a write,
// BEGIN for a read-only one, COMMIT and ROLLBACK.
var (
	hotBeginWrite = hot("BEGIN IMMEDIATE")
	hotBeginRead  = hot("BEGIN")
	hotCommit     = hot("COMMIT")
	hotRollback   = hot("ROLLBACK")
)

// hotStmt is a hot statement prepared on one connection, with the driver's
// argument and column slices it reuses from call to call.
type hotStmt struct {
	stmt driver.Stmt
	args []driver.NamedValue
	dest []driver.Value
}

// txLayout is where database/sql keeps, inside a *sql.Tx, the driver's
// transaction (txi) and whether the transaction ended (done). database/sql
// offers no other way from a transaction to its driver's: ok is false
// when a Go release moved them, and the hot path is then off (every
// statement goes through database/sql).
var txLayout = func() (l struct {
	txi, done uintptr
	ok        bool
}) {
	t := reflect.TypeFor[sql.Tx]()
	txi, ok1 := t.FieldByName("txi")
	done, ok2 := t.FieldByName("done")
	l.ok = ok1 && ok2 && txi.Type == reflect.TypeFor[driver.Tx]() && done.Type == reflect.TypeFor[atomic.Bool]()
	l.txi, l.done = txi.Offset, done.Offset
	return l
}()

// The levers of the hot path, which hotOff turns off one by one so that a
// benchmark measures each beside the path without it in the same run
// (export_test.go): the statements run through the driver (hotStatements),
// and the transactions' BEGIN and COMMIT run by slot rather than looked up
// in the LRU cache by their text (hotBeginCommit).
const (
	hotStatements uint32 = 1 << iota
	hotBeginCommit
)

// hotOff holds the levers turned off; none outside the benchmarks.
var hotOff atomic.Uint32

// hotTx returns the store's connection and the *sql.Tx when db is a
// transaction that cachingConn began, nil otherwise. Whether it is still
// open is for the caller to ask under the connection's lock (txEnded).
func hotTx(db DBTX) (*cachingConn, *sql.Tx) {
	tx, ok := db.(*sql.Tx)
	if !ok || tx == nil || !txLayout.ok || hotOff.Load()&hotStatements != 0 {
		return nil, nil
	}
	ct, ok := (*(*driver.Tx)(unsafe.Add(unsafe.Pointer(tx), txLayout.txi))).(*cachedTx)
	if !ok {
		return nil, nil
	}
	return ct.c, tx
}

// txEnded reports whether database/sql ended tx. It marks a transaction
// ended before it commits or rolls it back on the connection, which then
// waits for the connection's lock: read under that lock, a transaction not
// yet ended stays open until the lock is released.
func txEnded(tx *sql.Tx) bool {
	return (*atomic.Bool)(unsafe.Add(unsafe.Pointer(tx), txLayout.done)).Load()
}

// hotValue is a's value as database/sql would hand it to the driver, for
// the kinds the hot statements bind; ok is false for any other kind (the
// call then goes through database/sql).
func hotValue(a any) (driver.Value, bool) {
	switch v := a.(type) {
	case nil, int64, string, []byte, bool, float64:
		return v, true
	case int:
		return int64(v), true
	}
	return nil, false
}

// prepared returns the connection's statement of q, preparing it on first
// use. The caller holds c.run.
func (c *cachingConn) prepared(ctx context.Context, q *hotQuery) (*hotStmt, error) {
	if q.slot < len(c.hot) {
		if hs := c.hot[q.slot]; hs != nil {
			return hs, nil
		}
	} else {
		c.hot = append(c.hot, make([]*hotStmt, hotQueries-len(c.hot))...)
	}
	st, err := c.raw().PrepareContext(ctx, q.text)
	if err != nil {
		return nil, err
	}
	hs := &hotStmt{stmt: st}
	c.hot[q.slot] = hs
	return hs, nil
}

// bind fills hs's argument slice with args; ok is false when one of them
// is of a kind hotValue does not take.
func (hs *hotStmt) bind(args []any) bool {
	if cap(hs.args) < len(args) {
		hs.args = make([]driver.NamedValue, len(args))
	}
	hs.args = hs.args[:len(args)]
	for i, a := range args {
		v, ok := hotValue(a)
		if !ok {
			return false
		}
		hs.args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return true
}

// unbind drops the arguments, so that no message outlives its statement.
func (hs *hotStmt) unbind() { clear(hs.args) }

// onConn runs run on the store's connection when db is a transaction
// open on it, under the connection's lock, and reports whether run ran
// the statement (false: db is no such transaction, it has ended, or run
// declined; the caller then goes through database/sql).
func onConn(db DBTX, run func(c *cachingConn) bool) bool {
	c, tx := hotTx(db)
	if c == nil {
		return false
	}
	c.run.Lock()
	defer c.run.Unlock()
	return !txEnded(tx) && run(c)
}

// bound returns the connection's statement of q with args bound; ok is
// false when an argument is of a kind the hot path does not take.
func (c *cachingConn) bound(ctx context.Context, q *hotQuery, args []any) (hs *hotStmt, ok bool, err error) {
	hs, err = c.prepared(ctx, q)
	if err != nil {
		return nil, true, translate(err)
	}
	if !hs.bind(args) {
		hs.unbind()
		return nil, false, nil
	}
	return hs, true, nil
}

// runQuery runs q on c with args and returns its rows, and the statement
// whose column slice reads them, c.run held; ok as bound's.
func (c *cachingConn) runQuery(ctx context.Context, q *hotQuery, args []any) (hs *hotStmt, rows driver.Rows, ok bool, err error) {
	hs, ok, err = c.bound(ctx, q, args)
	if hs == nil {
		return nil, nil, ok, err
	}
	rows, err = hs.stmt.(driver.StmtQueryContext).QueryContext(ctx, hs.args)
	hs.unbind()
	if err != nil {
		return nil, nil, true, translate(err)
	}
	if n := len(rows.Columns()); len(hs.dest) != n {
		hs.dest = make([]driver.Value, n)
	}
	return hs, rows, true, nil
}

// hotResult is what an exec of a hot statement reports: the rows it
// changed and the last rowid inserted.
type hotResult struct{ rows, id int64 }

// exec runs q on db with args and returns the rows it changed and the last
// rowid it inserted (as sql.Result has them).
func (q *hotQuery) exec(ctx context.Context, db DBTX, args ...any) (r hotResult, err error) {
	if onConn(db, func(c *cachingConn) bool {
		hs, ok, berr := c.bound(ctx, q, args)
		if hs == nil {
			err = berr
			return ok
		}
		var res driver.Result
		res, err = hs.stmt.(driver.StmtExecContext).ExecContext(ctx, hs.args)
		hs.unbind()
		if err != nil {
			err = translate(err)
			return true
		}
		r, err = readResult(res)
		return true
	}) {
		return r, err
	}
	res, err := db.ExecContext(ctx, q.text, args...)
	if err != nil {
		return hotResult{}, err
	}
	return readResult(res)
}

// readResult reads res's counts.
func readResult(res driver.Result) (hotResult, error) {
	var r hotResult
	var err error
	if r.rows, err = res.RowsAffected(); err != nil {
		return hotResult{}, err
	}
	r.id, err = res.LastInsertId()
	return r, err
}

// row runs q on db with args for its first row, which the returned
// scanner reads like *sql.Row: sql.ErrNoRows when there is none.
func (q *hotQuery) row(ctx context.Context, db DBTX, args ...any) scanner {
	r := &hotRow{}
	if onConn(db, func(c *cachingConn) bool {
		hs, rows, ok, err := c.runQuery(ctx, q, args)
		if hs == nil {
			r.err = err
			return ok
		}
		switch err := rows.Next(hs.dest); {
		case errors.Is(err, io.EOF):
			r.err = sql.ErrNoRows
		case err != nil:
			r.err = translate(err)
		default:
			r.values = append([]driver.Value(nil), hs.dest...)
		}
		clear(hs.dest)
		if cerr := rows.Close(); cerr != nil && r.err == nil {
			r.err, r.values = translate(cerr), nil
		}
		return true
	}) {
		return r
	}
	return db.QueryRowContext(ctx, q.text, args...)
}

// each runs q on db with args and calls fn with each row it returns, in
// order; fn reads the row (Scan) and runs no statement. It returns fn's
// first error, or the statement's.
func (q *hotQuery) each(ctx context.Context, db DBTX, args []any, fn func(scanner) error) (err error) {
	if onConn(db, func(c *cachingConn) bool {
		hs, rows, ok, qerr := c.runQuery(ctx, q, args)
		if hs == nil {
			err = qerr
			return ok
		}
		r := &hotRow{values: hs.dest}
		for err == nil {
			if err = rows.Next(hs.dest); err == nil {
				err = fn(r)
			}
		}
		clear(hs.dest)
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		err = translate(err)
		return true
	}) {
		return err
	}
	rows, err := db.QueryContext(ctx, q.text, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		if err := fn(rows); err != nil {
			rows.Close()
			return err
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// hotRow is the first row of a hot statement, or the error that stands in
// for it, as *sql.Row has them.
type hotRow struct {
	values []driver.Value
	err    error
}

// Scan copies the row's columns into dest, as *sql.Row.Scan does for the
// kinds the hot statements read.
func (r *hotRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.values) {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", len(r.values), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.values[i]); err != nil {
			return fmt.Errorf("sql: Scan error on column index %d: %w", i, err)
		}
	}
	return nil
}

// assign stores the driver's value v in the pointer d, for the kinds the
// hot statements read (SQLite gives int64, float64, string, []byte or nil).
func assign(d any, v driver.Value) error {
	switch d := d.(type) {
	case *any:
		*d = v
		return nil
	case *[]byte:
		switch v := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = v // the driver's own copy
			return nil
		case string:
			*d = []byte(v)
			return nil
		}
	case *string:
		switch v := v.(type) {
		case string:
			*d = v
			return nil
		case []byte:
			*d = string(v)
			return nil
		}
	case *int64:
		if v, ok := v.(int64); ok {
			*d = v
			return nil
		}
	case *int:
		if v, ok := v.(int64); ok {
			*d = int(v)
			return nil
		}
	case *bool:
		if v, ok := v.(int64); ok {
			*d = v != 0
			return nil
		}
	case *sql.NullString:
		return d.Scan(v)
	case *sql.NullInt64:
		return d.Scan(v)
	}
	return fmt.Errorf("cannot assign %T to %T", v, d)
}
