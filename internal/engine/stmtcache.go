package engine

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"sync"
)

// stmtCacheSize bounds the prepared statements kept per connection.
const stmtCacheSize = 128

// cachingConn wraps the store's SQLite connection and keeps its statements
// prepared, keyed by SQL text. SQLite spends more time parsing and planning
// mqlite's statements (the insert carries two triggers) than running them;
// database/sql would prepare and finalize them on every call. A statement
// still in use by open rows is not shared: a second caller gets a fresh
// one-shot statement instead.
type cachingConn struct {
	driver.Conn
	closed func() // called after the connection closed; may be nil
	// run serializes the statements of the connection: database/sql's
	// calls (under its own lock of the connection, which the hot path
	// does not take) and the hot path's (hot.go). hot is the hot
	// statements, by slot, under run.
	run   sync.Mutex
	hot   []*hotStmt
	mu    sync.Mutex
	lru   *list.List // of *cachedStmt, most recently used first
	byKey map[string]*list.Element
}

type cachedStmt struct {
	query string
	stmt  driver.Stmt
	busy  bool
}

type rawConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

var (
	_ rawConn = (*cachingConn)(nil)
)

func newCachingConn(c driver.Conn) (*cachingConn, error) {
	if _, ok := c.(rawConn); !ok {
		return nil, errors.New("sqlite connection lacks the context interfaces mqlite needs")
	}
	return &cachingConn{Conn: c, lru: list.New(), byKey: map[string]*list.Element{}}, nil
}

func (c *cachingConn) raw() rawConn { return c.Conn.(rawConn) }

// Unwrap returns the SQLite connection.
func (c *cachingConn) Unwrap() driver.Conn { return c.Conn }

// BeginTx begins a transaction with a cached BEGIN statement, and commits
// and rolls it back with cached ones: the driver prepares and finalizes each
// of them afresh, which cost about half the CPU of a one-row transaction. A
// write transaction begins IMMEDIATE, as the connection's _txlock says; a
// read-only one DEFERRED. Other options go to the driver.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.run.Lock()
	defer c.run.Unlock()
	if opts.Isolation != driver.IsolationLevel(0) {
		tx, err := c.raw().BeginTx(ctx, opts)
		if err != nil {
			return nil, translate(err)
		}
		return translatingTx{tx}, nil
	}
	begin := hotBeginWrite
	if opts.ReadOnly {
		begin = hotBeginRead
	}
	if err := c.execHot(ctx, begin); err != nil {
		return nil, translate(err)
	}
	return &cachedTx{c: c, ctx: ctx}, nil
}

// cachedTx is a transaction begun by cachingConn.BeginTx. Its COMMIT runs
// under the context the transaction began with (database/sql documents it
// as in use until the end), so that a wait for a lock ends with it.
type cachedTx struct {
	c   *cachingConn
	ctx context.Context
}

// Commit commits. A COMMIT that fails can leave the transaction open (a
// busy lock): it is then rolled back, so that the connection goes back to
// database/sql without one, and the commit's error is returned.
func (t *cachedTx) Commit() error {
	t.c.run.Lock()
	defer t.c.run.Unlock()
	err := t.c.execHot(t.ctx, hotCommit)
	if err != nil {
		_ = t.c.execHot(context.Background(), hotRollback) // fails when the COMMIT ended the transaction
	}
	return translate(err)
}

// Rollback rolls back, whatever the context: database/sql rolls back when
// it is done.
func (t *cachedTx) Rollback() error {
	t.c.run.Lock()
	defer t.c.run.Unlock()
	return translate(t.c.execHot(context.Background(), hotRollback))
}

// execHot runs the hot statement q, which takes no argument, c.run held.
func (c *cachingConn) execHot(ctx context.Context, q *hotQuery) error {
	if hotOff.Load()&hotBeginCommit != 0 {
		_, err := c.exec(ctx, q.text, nil)
		return err
	}
	hs, err := c.prepared(ctx, q)
	if err != nil {
		return err
	}
	_, err = hs.stmt.(driver.StmtExecContext).ExecContext(ctx, nil)
	return err
}

// translatingTx gives a failed commit or rollback its sentinel (translate).
type translatingTx struct{ driver.Tx }

func (t translatingTx) Commit() error   { return translate(t.Tx.Commit()) }
func (t translatingTx) Rollback() error { return translate(t.Tx.Rollback()) }

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.run.Lock()
	defer c.run.Unlock()
	st, err := c.raw().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &lockedStmt{stmt: st, c: c}, nil
}

// lockedStmt is a statement the application prepared: it runs under the
// connection's lock, like every other statement of the connection.
type lockedStmt struct {
	stmt driver.Stmt
	c    *cachingConn
}

// Close finalizes the statement.
func (s *lockedStmt) Close() error {
	s.c.run.Lock()
	defer s.c.run.Unlock()
	return s.stmt.Close()
}

// NumInput is the driver's count of the statement's parameters.
func (s *lockedStmt) NumInput() int { return s.stmt.NumInput() }

// Exec is the legacy form, which database/sql never calls on a
// StmtExecContext: ExecContext with the arguments numbered.
func (s *lockedStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), numbered(args))
}

// Query is the legacy form, which database/sql never calls on a
// StmtQueryContext: QueryContext with the arguments numbered.
func (s *lockedStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), numbered(args))
}

// numbered is args as positional named values.
func numbered(args []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(args))
	for i, v := range args {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

// ExecContext runs the statement under the connection's lock.
func (s *lockedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.run.Lock()
	defer s.c.run.Unlock()
	res, err := s.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	return res, translate(err)
}

// QueryContext runs the statement under the connection's lock; its
// rows step under it too.
func (s *lockedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.run.Lock()
	defer s.c.run.Unlock()
	rows, err := s.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, translate(err)
	}
	return &releasingRows{Rows: rows, c: s.c}, nil
}

func (c *cachingConn) Ping(ctx context.Context) error {
	c.run.Lock()
	defer c.run.Unlock()
	return c.raw().Ping(ctx)
}

func (c *cachingConn) ResetSession(ctx context.Context) error {
	c.run.Lock()
	defer c.run.Unlock()
	return c.raw().ResetSession(ctx)
}

func (c *cachingConn) IsValid() bool { return c.raw().IsValid() }

// acquire returns the cached statement for query, preparing it on first use,
// or nil when the cached one is busy.
func (c *cachingConn) acquire(ctx context.Context, query string) (*cachedStmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[query]; ok {
		cs := el.Value.(*cachedStmt)
		if cs.busy {
			return nil, nil
		}
		c.lru.MoveToFront(el)
		cs.busy = true
		return cs, nil
	}
	st, err := c.raw().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{query: query, stmt: st, busy: true}
	c.byKey[query] = c.lru.PushFront(cs)
	c.evict()
	return cs, nil
}

// evict closes the least recently used idle statements beyond the bound.
func (c *cachingConn) evict() {
	for el := c.lru.Back(); el != nil && c.lru.Len() > stmtCacheSize; {
		prev := el.Prev()
		if cs := el.Value.(*cachedStmt); !cs.busy {
			c.lru.Remove(el)
			delete(c.byKey, cs.query)
			_ = cs.stmt.Close()
		}
		el = prev
	}
}

func (c *cachingConn) release(cs *cachedStmt) {
	c.mu.Lock()
	cs.busy = false
	c.mu.Unlock()
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.run.Lock()
	defer c.run.Unlock()
	res, err := c.exec(ctx, query, args)
	return res, translate(err)
}

func (c *cachingConn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.acquire(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.raw().ExecContext(ctx, query, args)
	}
	defer c.release(cs)
	return cs.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.run.Lock()
	defer c.run.Unlock()
	rows, err := c.query(ctx, query, args)
	return rows, translate(err)
}

func (c *cachingConn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.acquire(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		rows, err := c.raw().QueryContext(ctx, query, args)
		if err != nil {
			return nil, err
		}
		return &releasingRows{Rows: rows, c: c}, nil
	}
	rows, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		c.release(cs)
		return nil, err
	}
	return &releasingRows{Rows: rows, c: c, cs: cs}, nil
}

// Close finalizes every cached statement, then closes the connection.
func (c *cachingConn) Close() error {
	c.run.Lock()
	defer c.run.Unlock()
	for _, hs := range c.hot {
		if hs != nil {
			_ = hs.stmt.Close()
		}
	}
	c.hot = nil
	c.mu.Lock()
	for el := c.lru.Front(); el != nil; el = el.Next() {
		_ = el.Value.(*cachedStmt).stmt.Close()
	}
	c.lru.Init()
	c.byKey = map[string]*list.Element{}
	c.mu.Unlock()
	err := c.Conn.Close()
	if c.closed != nil {
		c.closed()
	}
	return err
}

// releasingRows steps under the connection's lock, and hands its cached
// statement (cs; nil for none) back to the cache when closed.
type releasingRows struct {
	driver.Rows
	c    *cachingConn
	cs   *cachedStmt
	once sync.Once
}

// Next gives a failed step (a RETURNING statement writes as it steps) its
// sentinel; io.EOF passes unchanged.
func (r *releasingRows) Next(dest []driver.Value) error {
	r.c.run.Lock()
	defer r.c.run.Unlock()
	return translate(r.Rows.Next(dest))
}

func (r *releasingRows) Close() error {
	r.c.run.Lock()
	err := r.Rows.Close()
	r.c.run.Unlock()
	if r.cs != nil {
		r.once.Do(func() { r.c.release(r.cs) })
	}
	return err
}
