package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// DefaultMaxConns bounds the store's pool when ConnConfig.MaxConns is 0.
const DefaultMaxConns = 8

// PollEvery is how often a store whose notification connection is down
// wakes its waiting Receives to look again (the fallback of LISTEN).
const PollEvery = time.Second

// store is what the engine knows of one open store: its configuration
// (clock, limits, callbacks) and whether it still runs.
type store struct {
	cfg    driver.ConnConfig
	closed atomic.Bool
	stop   context.CancelFunc
	done   chan struct{}
}

// now returns the store's now, or errs.ErrClosed once it closes.
func (st *store) now() (int64, error) {
	if st.closed.Load() || st.cfg.Closing() {
		return 0, errs.ErrClosed
	}
	return st.cfg.Now(), nil
}

// stores maps each store's handle to its store, for the statements run on
// a caller's transaction on that handle (storeOf).
var (
	stores sync.Map     // *sql.DB → *store
	open   atomic.Int64 // how many stores are open
	only   atomic.Pointer[store]
)

// storeOf returns the store whose handle db runs on; for a transaction on
// the application's own pgx handle, the process's one open PostgreSQL
// store when there is exactly one, and nil otherwise.
func storeOf(db driver.DBTX) *store {
	if h := driver.HandleOf(db); h != nil {
		if v, ok := stores.Load(h); ok {
			return v.(*store)
		}
	}
	if open.Load() == 1 {
		return only.Load()
	}
	return nil
}

// nowOf is the now of the statements on db: its store's clock, or the
// wall clock for a handle of no store when none or several are open.
func nowOf(db driver.DBTX) (int64, error) {
	if st := storeOf(db); st != nil {
		return st.now()
	}
	return time.Now().UnixMilli(), nil
}

// DefaultMaxMessageBytes is the limit of a message sent on a handle of no
// store (mqlite's default Config.MaxMessageBytes).
const DefaultMaxMessageBytes = 1 << 20

// maxBytesOf is the largest message db's store takes.
func maxBytesOf(db driver.DBTX) int64 {
	if st := storeOf(db); st != nil {
		return st.cfg.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

// Open opens a pool on the database at the URL cfg.Path, at most
// cfg.MaxConns connections (DefaultMaxConns), whose transactions report
// their commits and rollbacks to cfg, and starts listening for other
// processes' commits (cfg.Woken). release stops the listener.
func (PostgreSQL) Open(cfg driver.ConnConfig) (*sql.DB, func(), error) {
	pc, err := pgx.ParseConfig(cfg.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the PostgreSQL URL: %w", errs.ErrInvalidArgument, err)
	}
	st := &store{cfg: cfg, done: make(chan struct{})}
	db := sql.OpenDB(connector{inner: stdlib.GetConnector(*pc), st: st})
	n := cfg.MaxConns
	if n <= 0 {
		n = DefaultMaxConns
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	stores.Store(db, st)
	if open.Add(1) == 1 {
		only.Store(st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.stop = cancel
	go st.listen(ctx, pc)
	var once sync.Once
	release := func() {
		once.Do(func() {
			st.closed.Store(true)
			cancel()
			<-st.done
			stores.Delete(db)
			if open.Add(-1) == 1 {
				stores.Range(func(_, v any) bool { only.Store(v.(*store)); return false })
			} else {
				only.Store(nil)
			}
		})
	}
	return db, release, nil
}

// connector opens pgx connections that report their transactions' ends.
type connector struct {
	inner sqldriver.Connector
	st    *store
}

func (c connector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("postgres: pgx gave a %T connection", dc)
	}
	if c.st.cfg.Opened != nil {
		c.st.cfg.Opened()
	}
	return &conn{Conn: pc, st: c.st, key: newKey()}, nil
}

func (c connector) Driver() sqldriver.Driver { return c.inner.Driver() }

// conn is a pgx connection whose transactions report their ends: a commit
// to cfg.Commit (or, once the store is closing, a rollback and
// errs.ErrClosed), a rollback to cfg.Rollback, each with the connection's
// key, under which its statements report their changes (reporterOf).
type conn struct {
	*stdlib.Conn
	st  *store
	key driver.TxKey
}

// keys hands out the TxKey of each connection and of each statement run in
// autocommit (reporterOf): never 0, never twice in a process, so that no two
// transactions, of one store or of two, share one.
var keys atomic.Uint64

// idle reports whether no transaction is open on the connection, as the
// server said at the end of its last statement: a statement run now is in
// autocommit.
func (c *conn) idle() bool { return c.Conn.Conn().PgConn().TxStatus() == 'I' }

// TxKey is the key of the connection's transactions (driver.Keyed).
func (c *conn) TxKey() driver.TxKey { return c.key }

// newKey returns a TxKey never given before.
func newKey() driver.TxKey { return driver.TxKey(keys.Add(1)) }

func (c *conn) Begin() (sqldriver.Tx, error) {
	return c.BeginTx(context.Background(), sqldriver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &hookTx{tx: tx, st: c.st, key: c.key}, nil
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.st.cfg.Closed != nil {
		c.st.cfg.Closed()
	}
	return err
}

// hookTx is a transaction of conn: its end is reported with the key of
// its connection.
type hookTx struct {
	tx  sqldriver.Tx
	st  *store
	key driver.TxKey
}

func (t *hookTx) Commit() error {
	cfg := &t.st.cfg
	if t.st.closed.Load() || cfg.Closing() {
		err := t.tx.Rollback()
		if cfg.Rollback != nil {
			cfg.Rollback(t.key)
		}
		return errors.Join(errs.ErrClosed, err)
	}
	if err := t.tx.Commit(); err != nil {
		if cfg.Rollback != nil {
			cfg.Rollback(t.key)
		}
		return err
	}
	if cfg.Commit != nil {
		cfg.Commit(t.key)
	}
	return nil
}

func (t *hookTx) Rollback() error {
	err := t.tx.Rollback()
	if t.st.cfg.Rollback != nil {
		t.st.cfg.Rollback(t.key)
	}
	return err
}

// Channel is the channel a commit notifies with the name of a queue it
// left a message of claimable or scheduled (schema/postgres.sql).
const Channel = "mqlite_claimable"

// listen holds a connection of its own that LISTENs on Channel and tells
// the store each queue another connection committed to (cfg.Woken). While
// that connection is down it wakes every waiter each PollEvery instead,
// and once it is back, once more: what was committed meanwhile is found by
// looking. It stops when ctx ends.
func (st *store) listen(ctx context.Context, pc *pgx.ConnConfig) {
	defer close(st.done)
	woken := st.cfg.Woken
	if woken == nil {
		woken = func(string) {}
	}
	for ctx.Err() == nil {
		c, err := pgx.ConnectConfig(ctx, pc)
		if err == nil {
			if _, err = c.Exec(ctx, "LISTEN "+Channel); err == nil {
				woken("")
				for {
					n, err := c.WaitForNotification(ctx)
					if err != nil {
						break
					}
					woken(n.Payload)
				}
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		woken("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(PollEvery):
		}
	}
}
