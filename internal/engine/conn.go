// Package engine is mqlite's SQL core: the connection setup, queue
// administration, enqueue, claim, settlement, sweeps and recovery. Every
// function takes "now" as epoch milliseconds from the store's clock; nothing
// here reads the wall clock or CURRENT_TIMESTAMP. SQLite implements
// driver.Driver, the store boundary: the SQLite-only mechanisms stay
// behind it, and the engine-neutral types it speaks are driver's.
package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"sync/atomic"

	mqdriver "github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// PageSize is the page size of a new file. Small pages keep the WAL bytes of
// one small commit low; see docs/benchmark.md for the measurement.
const PageSize = 1024

// storeFuncs is what the SQL functions of one store read. Close swaps it for
// a closed value so a retained driver does not keep the store alive.
type storeFuncs struct {
	now      func() int64
	maxBytes int64
	history  int         // ConnConfig.AttemptHistory
	closing  func() bool // nil: closed
	settling func(key mqdriver.TxKey, op Op, queue string, seq int64, token string)
}

// load returns the live functions, or errs.ErrClosed once the store closes.
func load(p *atomic.Pointer[storeFuncs]) (*storeFuncs, error) {
	f := p.Load()
	if f.closing == nil || f.closing() {
		return nil, errs.ErrClosed
	}
	return f, nil
}

// openDB opens the store's database handle: a private driver instance whose
// connections carry the SQL functions mqlite_now() and
// mqlite_max_message_bytes(), reading this store's clock and limit, and
// mqlite_attempt() (attemptSQL), bounded by its history, so that
// outbox statements on a caller's transaction use the same time as the
// store, and mqlite_store_id(), which tells which store a caller's
// transaction is on. The pool holds exactly one connection: every statement of the
// process is serialized on it before SQLite sees it.
func openDB(cfg ConnConfig) (*sql.DB, func(), error) {
	var fns atomic.Pointer[storeFuncs]
	fns.Store(&storeFuncs{now: cfg.Now, maxBytes: cfg.MaxMessageBytes, history: cfg.AttemptHistory, closing: cfg.Closing, settling: cfg.Settling})
	d := &sqlite.Driver{}
	if err := d.RegisterScalarFunction("mqlite_now", 0,
		func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
			f, err := load(&fns)
			if err != nil {
				return nil, err
			}
			return f.now(), nil
		}); err != nil {
		return nil, nil, fmt.Errorf("register mqlite_now: %w", err)
	}
	if err := d.RegisterScalarFunction("mqlite_max_message_bytes", 0,
		func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
			f, err := load(&fns)
			if err != nil {
				return nil, err
			}
			return f.maxBytes, nil
		}); err != nil {
		return nil, nil, fmt.Errorf("register mqlite_max_message_bytes: %w", err)
	}
	if err := d.RegisterScalarFunction("mqlite_attempt", 4,
		func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			f, err := load(&fns)
			if err != nil {
				return nil, err
			}
			return appendAttempt(f.history, args)
		}); err != nil {
		return nil, nil, fmt.Errorf("register mqlite_attempt: %w", err)
	}
	if err := d.RegisterScalarFunction("mqlite_settling", 4,
		func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			f, err := load(&fns)
			if err != nil {
				return nil, err
			}
			op, _ := args[0].(string)
			queue, _ := args[1].(string)
			seq, _ := args[2].(int64)
			token, _ := args[3].(string)
			if f.settling != nil {
				f.settling(0, Op(op), queue, seq, token)
			}
			return f.now(), nil
		}); err != nil {
		return nil, nil, fmt.Errorf("register mqlite_settling: %w", err)
	}
	if err := d.RegisterScalarFunction("mqlite_store_id", 0,
		func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
			if _, err := load(&fns); err != nil {
				return nil, err
			}
			return cfg.StoreID, nil
		}); err != nil {
		return nil, nil, fmt.Errorf("register mqlite_store_id: %w", err)
	}
	sync := "NORMAL"
	if cfg.SyncFull {
		sync = "FULL"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeoutMS))
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "foreign_keys(0)")
	q.Add("_pragma", "temp_store(MEMORY)")
	// 8 MiB of page cache. Not more: a commit after a B-tree rebalance
	// walks the cache's whole hash table (SQLite's balance_nonroot parks a
	// page under the pending-byte page number while it reorders siblings,
	// and the commit then truncates the cache above the file's size), so
	// the cost of such a commit grows with the cache. At 32 MiB the walks
	// took 15-25% of a broker's CPU under batched receive+complete; at 8 MiB
	// they take a few percent, with the engine's benchmarks unchanged
	// (docs/benchmark.md, "Page cache").
	q.Add("_pragma", "cache_size(-8192)")
	ck := newCheckpointer(cfg.Path + "?" + q.Encode())
	d.RegisterConnectionHook(func(c sqlite.ExecQuerierContext, _ string) error {
		return registerHooks(c, cfg, ck.commit)
	})
	q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walBackstopPages))
	q.Set("_txlock", "immediate")
	db := sql.OpenDB(connector{d: d, dsn: cfg.Path + "?" + q.Encode(), opened: cfg.Opened, closed: cfg.Closed})
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	checkpointers.Store(db, ck)
	release := func() { checkpointers.Delete(db); fns.Store(&storeFuncs{}); ck.close() }
	return db, release, nil
}

type connector struct {
	d              *sqlite.Driver
	dsn            string
	opened, closed func()
}

func (c connector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.d.Open(c.dsn)
	if err != nil {
		return nil, translate(err)
	}
	cc, err := newCachingConn(conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	cc.closed = c.closed
	if c.opened != nil {
		c.opened()
	}
	return cc, nil
}
func (c connector) Driver() driver.Driver { return c.d }

// bodyLenColumn is the position of body_len in a messages row, and
// sizedColumns how many leading columns the hook reads to reach it.
const (
	bodyLenColumn = 6
	sizedColumns  = bodyLenColumn + 1
)

// registerHooks wires the connection's pre-update, commit and rollback hooks
// to cfg's callbacks; committed is called on every commit too (the
// checkpointer's kick). The pre-update hook reads the first seven columns
// of an inserted or updated messages row (id, queue, state, held,
// visible_at, locked_until, body_len) and of a deleted one, and the first
// three of an updated row's old values (id, queue, state); of queues only
// the first column (name): never a body.
func registerHooks(c sqlite.ExecQuerierContext, cfg ConnConfig, committed func()) error {
	h, ok := c.(sqlite.HookRegisterer)
	if !ok {
		return fmt.Errorf("sqlite connection %T cannot register hooks", c)
	}
	if cfg.Claimable != nil || cfg.Due != nil || cfg.Bounds != nil || cfg.Changed != nil || cfg.Created != nil || cfg.Dropped != nil {
		// SQLite calls the hook on the connection's goroutine, one row at
		// a time: the scratch slices are the hook's alone.
		m := messageHook{cfg: &cfg, row: make([]any, sizedColumns), old: make([]any, 3), gone: make([]any, sizedColumns)}
		h.RegisterPreUpdateHook(func(d sqlite.SQLitePreUpdateData) {
			switch d.TableName {
			case "mqlite_messages":
				m.write(&d)
			case "mqlite_queues":
				queueHook(&d, &cfg)
			}
		})
	}
	h.RegisterCommitHook(func() int32 {
		if cfg.Closing() {
			return 1 // SQLite turns the commit into a rollback
		}
		if cfg.Commit != nil {
			cfg.Commit(0)
		}
		committed()
		return 0
	})
	if cfg.Rollback != nil || cfg.Bounds != nil {
		h.RegisterRollbackHook(func() {
			if cfg.Bounds != nil {
				cfg.Bounds.Forget()
			}
			if cfg.Rollback != nil {
				cfg.Rollback(0)
			}
		})
	}
	return nil
}

// messageHook reports the writes of messages rows.
type messageHook struct {
	cfg  *ConnConfig
	row  []any // an inserted or updated row's first columns, reused from row to row
	old  []any // an updated row's old id, queue and state
	gone []any // a deleted row's first columns
}

// write reports one write of a messages row: the wake-ups of a row left
// claimable or due (insert and update), and its state change. A completed
// message (its row kept as the receipt) has left its queue: its completion is reported as
// the row leaving, with its bytes, and its deletion not at all.
func (m *messageHook) write(d *sqlite.SQLitePreUpdateData) {
	var ch RowChange
	if d.Op != sqlite3.SQLITE_DELETE {
		// New assigns into the elements of its argument slice: id, queue,
		// state, held, visible_at, locked_until, body_len.
		row := m.row
		if err := d.New(row...); err != nil {
			if m.cfg.Bounds != nil {
				m.cfg.Bounds.Forget() // a row the bounds did not see
			}
			return
		}
		ch.Bytes, _ = row[bodyLenColumn].(int64)
		ch.Queue, _ = row[1].(string)
		ch.New, _ = row[2].(string)
		if ch.New == StateCompleted {
			ch.New = ""
		}
		if ch.Queue != "" && m.cfg.Bounds != nil {
			// Held rows too: the claim's probe promotes and reaps them.
			col := 0
			switch ch.New {
			case "scheduled":
				col = 4 // visible_at
			case "locked":
				col = 5 // locked_until
			}
			if at, ok := row[col].(int64); ok && col > 0 {
				m.cfg.Bounds.Lower(ch.Queue, at)
			}
		}
		if ch.Queue != "" && row[3] == int64(0) {
			wake(m.cfg, ch.Queue, ch.New, row)
		}
		clear(row) // no message's strings outlive the hook
	}
	if m.cfg.Changed == nil {
		return
	}
	if d.Op != sqlite3.SQLITE_INSERT {
		old := m.old // id, queue, state
		if d.Op == sqlite3.SQLITE_DELETE {
			old = m.gone
		}
		if err := d.Old(old...); err != nil {
			return
		}
		ch.Queue, _ = old[1].(string)
		ch.Old, _ = old[2].(string)
		if len(old) == sizedColumns {
			ch.Bytes, _ = old[bodyLenColumn].(int64)
		}
		clear(old)
		if ch.Old == ch.New || ch.Old == StateCompleted {
			return
		}
	}
	m.cfg.Changed(0, ch)
}

// wake reports a row left claimable (Claimable) or due at a known moment
// (Due); row is its first six columns.
func wake(cfg *ConnConfig, q, state string, row []any) {
	switch state {
	case "active":
		if cfg.Claimable != nil {
			cfg.Claimable(q)
		}
	case "scheduled", "locked":
		col := 4 // visible_at
		if state == "locked" {
			col = 5 // locked_until
		}
		if at, ok := row[col].(int64); ok && cfg.Due != nil {
			cfg.Due(q, at)
		}
	}
}

// queueHook reports a queue created or dropped.
func queueHook(d *sqlite.SQLitePreUpdateData, cfg *ConnConfig) {
	var report func(mqdriver.TxKey, string)
	read := d.New
	switch d.Op {
	case sqlite3.SQLITE_INSERT:
		report = cfg.Created
	case sqlite3.SQLITE_DELETE:
		report, read = cfg.Dropped, d.Old
	}
	if report == nil {
		return
	}
	row := make([]any, 1) // name
	if err := read(row...); err != nil {
		return
	}
	if name, ok := row[0].(string); ok {
		report(0, name)
	}
}

// appendAttempt is mqlite_attempt(history, at, error, worker): the
// message's history (NULL for none) with the attempt appended, the last n
// kept (driver.AppendAttempt); with n of 0 or less, the history as it is.
func appendAttempt(n int, args []driver.Value) (driver.Value, error) {
	if n <= 0 {
		return args[0], nil
	}
	history, _ := args[0].(string)
	at, _ := args[1].(int64)
	text, _ := args[2].(string)
	worker, _ := args[3].(string)
	return mqdriver.AppendAttempt(history, mqdriver.Attempt{At: at, Error: text, Worker: worker}, n)
}
