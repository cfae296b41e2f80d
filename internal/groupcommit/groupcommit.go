// Package groupcommit runs the callers of Store.Tx in group commits: the
// callers that arrive while a transaction runs or commits wait for the
// next one, which runs each caller's callback, one after the other, in a
// savepoint of its own, and commits them all with one COMMIT. Under
// SyncFull that is one fsync for the group instead of one per caller.
//
// The package knows the store through Hooks only: how to begin a
// transaction on its connection, how to run a caller's callback, how to
// mark and undo what the connection's hooks recorded of a step, how to
// commit, and whether the store is closed.
package groupcommit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// The bounds of one group commit: how many callers run in one transaction,
// and how many body bytes they may send in it (Committer.Wrote) before the
// group commits and the callers still waiting go to the next one.
const (
	MaxCallers = 64
	MaxBytes   = 4 << 20
)

// Hooks is what a Committer asks of the store. F is the type of a caller's
// callback, M what MarkStep returns. The methods run on the goroutine that
// drives the group, one at a time.
type Hooks[F, M any] interface {
	// Begin begins a transaction on the store's connection. No ctx: the
	// group is no caller's; the store ends the wait when it closes.
	Begin() (*sql.Tx, error)
	// Run runs fn in tx, with ctx for its statements (the caller's values,
	// never cancelled), and returns fn's error. A panic or a
	// runtime.Goexit of fn goes through.
	Run(ctx context.Context, tx *sql.Tx, fn F) error
	// MarkStep records where what the connection's hooks recorded of the
	// open transaction tx stands, as a step begins.
	MarkStep(tx *sql.Tx) M
	// UndoStep drops what the connection's hooks recorded of tx since
	// mark: the step rolled back.
	UndoStep(tx *sql.Tx, mark M)
	// Commit commits tx, which holds the work of at least one caller.
	Commit(tx *sql.Tx) error
	// Closed returns the store's closed error once its Close has begun,
	// nil before.
	Closed() error
}

// Committer runs the callers of Do in group commits.
//
// The transaction is driven by one goroutine, started when a caller finds
// none running and ending when no caller waits: it begins, runs each
// waiting caller's callback in turn, and commits. The callbacks run on the
// driving goroutine rather than each on its caller's, because handing the
// transaction from goroutine to goroutine, twice per caller, cost more than
// the callbacks themselves on a loaded machine; a callback's panic is
// recovered there and raised again in its caller, and a callback that ends
// the driving goroutine (runtime.Goexit) has its step rolled back and a new
// goroutine carry the group on. Safe for concurrent use.
//
// On a store with one connection one group runs at a time. On a pool
// (Parallel), up to that many groups run at once, each driven by its own
// goroutine on its own connection, taking the waiting callers from one
// queue.
type Committer[F, M any] struct {
	hooks    Hooks[F, M]
	mu       sync.Mutex
	queue    []*member[F] // the callers waiting for their turn, oldest first
	running  int          // the driving goroutines running
	parallel int          // how many may run at once (1, or Parallel's)
	// written counts the body bytes the group in progress has sent (the
	// pre-update hook, Wrote): the group's byte bound. With several groups
	// at once it counts theirs together, and each begin starts it again: the
	// bound is then approximate.
	written atomic.Int64
	commits atomic.Int64 // the groups committed
}

// New returns a Committer over hooks.
func New[F, M any](hooks Hooks[F, M]) *Committer[F, M] {
	return &Committer[F, M]{hooks: hooks, parallel: 1}
}

// Parallel lets up to n groups run at once, each on its own connection:
// for a store whose handle keeps a pool of n connections. n below 1 is 1.
// Call it before the first Do.
func (c *Committer[F, M]) Parallel(n int) {
	c.mu.Lock()
	c.parallel = max(n, 1)
	c.mu.Unlock()
}

// The states of a member: waiting for its turn, taken by the committer
// (its callback runs or has run), or gone (its ctx ended first).
const (
	memberWaiting int32 = iota
	memberTaken
	memberGone
)

// member is one caller of Do in the committer's queue.
type member[F any] struct {
	ctx   context.Context
	fn    F
	state atomic.Int32
	done  chan Outcome // committer to caller, once
}

// Outcome is what a caller of Do gets: its error (fn's, ctx's, the
// commit's), or the value its callback panicked with.
type Outcome struct {
	Err      error
	Panicked any
}

// errGoexit is the outcome of a callback that called runtime.Goexit.
var errGoexit = errors.New("the callback called runtime.Goexit (t.FailNow?); its work is rolled back")

// Do runs fn in the next group commit and returns its outcome. When ctx
// ends before fn's turn, fn never runs and ctx's error is returned; once fn
// runs, Do waits on: fn must not outlive its caller's call, and once it
// returned nil its work is in the group's transaction, whose commit is the
// outcome. A panic of fn is returned (Outcome.Panicked), for the caller to
// raise again.
func (c *Committer[F, M]) Do(ctx context.Context, fn F) Outcome {
	return c.join(ctx, fn).wait()
}

// Wrote counts n body bytes sent by the group in progress toward its byte
// bound (the pre-update hook).
func (c *Committer[F, M]) Wrote(n int64) { c.written.Add(n) }

// Commits returns how many groups were committed.
func (c *Committer[F, M]) Commits() int64 { return c.commits.Load() }

// Waiting returns how many callers wait for their turn.
func (c *Committer[F, M]) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.queue {
		if m.state.Load() == memberWaiting {
			n++
		}
	}
	return n
}

// join queues a new member, starting the driving goroutine when none runs.
func (c *Committer[F, M]) join(ctx context.Context, fn F) *member[F] {
	m := &member[F]{ctx: ctx, fn: fn, done: make(chan Outcome, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, m)
	start := c.running < c.parallel
	if start {
		c.running++
	}
	c.mu.Unlock()
	if start {
		go c.drive(nil)
	}
	return m
}

// take returns the oldest member still waiting, now taken, or nil when none
// waits.
func (c *Committer[F, M]) take() *member[F] {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) > 0 {
		m := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if m.state.CompareAndSwap(memberWaiting, memberTaken) {
			return m
		}
	}
	return nil
}

// idle reports whether no member waits, and then marks the driving
// goroutine stopped, under the same lock join starts one with.
func (c *Committer[F, M]) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		return false
	}
	c.running--
	return true
}

// group is one group commit in progress.
type group[F any] struct {
	tx     *sql.Tx      // nil after a bare step rolled it back: the next step begins one
	steps  int          // the members taken
	kept   []*member[F] // the members whose work is in tx, waiting for the commit
	broken error        // tx failed in a step: the group rolls back
	bare   bool         // the step running has no savepoint (kept is empty)
}

// drive runs group commits until no caller waits, first finishing g when
// it is not nil (a group whose driving goroutine a callback ended). Between
// two groups it yields the processor once: the callers the commit just
// answered run and, when they call again at once (producers in a loop),
// join the next group instead of each making a group of its own. A yield
// is no timer: when no other goroutine is runnable it returns at once.
func (c *Committer[F, M]) drive(g *group[F]) {
	if g != nil {
		c.runGroup(g)
		runtime.Gosched()
	}
	for !c.idle() {
		if g := c.beginGroup(); g != nil {
			c.runGroup(g)
		}
		runtime.Gosched()
	}
}

// beginGroup begins a group's transaction. A begin that fails fails every
// member waiting then, and returns nil.
func (c *Committer[F, M]) beginGroup() *group[F] {
	tx, err := c.hooks.Begin()
	if err != nil {
		err = c.beginError(err)
		for m := c.take(); m != nil; m = c.take() {
			m.done <- Outcome{Err: err}
		}
		return nil
	}
	c.written.Store(0)
	return &group[F]{tx: tx}
}

// beginError is the error of a group's BEGIN that failed: the store's
// closed error once Close has begun.
func (c *Committer[F, M]) beginError(err error) error {
	if cerr := c.hooks.Closed(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("begin: %w", err)
}

// runGroup runs the steps of the members waiting, up to the bounds, then
// commits (or rolls back) g and tells every kept member the outcome.
func (c *Committer[F, M]) runGroup(g *group[F]) {
	for g.broken == nil && g.steps < MaxCallers && c.written.Load() < MaxBytes {
		m := c.take()
		if m == nil {
			break
		}
		g.steps++
		c.step(g, m)
	}
	var err error
	switch {
	case g.broken != nil:
		err = fmt.Errorf("group transaction failed in another caller's step: %w", g.broken)
		if g.tx != nil {
			err = errors.Join(err, ignoreDone(g.tx.Rollback()))
		}
	case g.tx == nil: // every step rolled back bare
	case len(g.kept) == 0:
		err = ignoreDone(g.tx.Rollback())
	default:
		err = c.hooks.Commit(g.tx)
		if err == nil {
			c.commits.Add(1)
		} else {
			if cerr := c.hooks.Closed(); cerr != nil && !errors.Is(err, cerr) {
				err = errors.Join(cerr, err)
			}
			err = fmt.Errorf("commit: %w", err)
		}
	}
	for _, m := range g.kept {
		m.done <- Outcome{Err: err}
	}
}

// wait waits for m's outcome. When ctx ends before m's turn, m leaves the
// queue and ctx's error is returned; once its callback runs, the wait goes
// on: the callback must not outlive its caller's call, and once it returned
// nil its work is in the group's transaction, whose commit is the outcome.
func (m *member[F]) wait() Outcome {
	select {
	case o := <-m.done:
		return o
	case <-m.ctx.Done():
		if m.state.CompareAndSwap(memberWaiting, memberGone) {
			return Outcome{Err: fmt.Errorf("begin: waiting for the connection: %w", m.ctx.Err())}
		}
		return <-m.done
	}
}

// step runs m's callback in a savepoint of g's transaction: released into
// it when the callback returns nil with m's ctx still alive (m is kept: it
// waits for the commit), rolled back to otherwise, and when the callback
// panics (m gets the panic to raise again) or ends the goroutine (m gets
// errGoexit, and a new goroutine carries g on). What the hooks recorded of
// the step (metrics, settlements) is dropped with it. A savepoint that
// cannot be taken, released or rolled back to breaks g.
//
// The first step whose work the transaction holds needs no savepoint: with
// no other caller's work in it, undoing the step is rolling the whole
// transaction back (the next step begins another). A lone caller, and the
// first of every group, spares a SAVEPOINT and a RELEASE.
func (c *Committer[F, M]) step(g *group[F], m *member[F]) {
	if err := m.ctx.Err(); err != nil {
		m.done <- Outcome{Err: err}
		return
	}
	if g.tx == nil {
		tx, err := c.hooks.Begin()
		if err != nil {
			g.broken = c.beginError(err)
			m.done <- Outcome{Err: g.broken}
			return
		}
		g.tx = tx
	}
	stmtCtx := context.WithoutCancel(m.ctx)
	mark := c.hooks.MarkStep(g.tx)
	g.bare = len(g.kept) == 0
	if !g.bare {
		if _, err := g.tx.ExecContext(stmtCtx, "SAVEPOINT mqlite_step"); err != nil {
			g.broken = fmt.Errorf("savepoint: %w", err)
			m.done <- Outcome{Err: g.broken}
			return
		}
	}
	var ferr error
	var panicked any
	exited := true // until fn returns or panics: runtime.Goexit ends this goroutine
	defer func() {
		if exited {
			if rb := c.rollbackStep(stmtCtx, g, mark); rb != nil {
				g.broken = rb
			}
			m.done <- Outcome{Err: errGoexit}
			go c.drive(g)
		}
	}()
	func() {
		defer func() {
			if exited {
				if p := recover(); p != nil { // nil: a Goexit, which goes on
					panicked, exited = p, false
				}
			}
		}()
		ferr = c.hooks.Run(stmtCtx, g.tx, m.fn)
		exited = false
	}()
	if panicked != nil {
		if rb := c.rollbackStep(stmtCtx, g, mark); rb != nil {
			g.broken = rb
		}
		m.done <- Outcome{Panicked: panicked}
		return
	}
	if ferr == nil {
		ferr = m.ctx.Err()
	}
	if ferr != nil {
		rb := c.rollbackStep(stmtCtx, g, mark)
		g.broken = rb
		m.done <- Outcome{Err: errors.Join(ferr, ignoreDone(rb))} // fn may have ended tx itself
		return
	}
	if !g.bare {
		if _, err := g.tx.ExecContext(stmtCtx, "RELEASE mqlite_step"); err != nil {
			g.broken = fmt.Errorf("release savepoint: %w", err)
			m.done <- Outcome{Err: g.broken}
			return
		}
	}
	g.kept = append(g.kept, m)
}

// rollbackStep undoes g's step: its rows (rolled back to its savepoint,
// which is then released; a bare step's whole transaction, after which g
// has none) and what the hooks recorded since mark.
func (c *Committer[F, M]) rollbackStep(ctx context.Context, g *group[F], mark M) error {
	c.hooks.UndoStep(g.tx, mark)
	if g.bare {
		err := g.tx.Rollback() // the transaction is done, even when this fails
		g.tx = nil
		if err != nil {
			return fmt.Errorf("roll back: %w", err)
		}
		return nil
	}
	for _, q := range [...]string{"ROLLBACK TO mqlite_step", "RELEASE mqlite_step"} {
		if _, err := g.tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("roll back to savepoint: %w", err)
		}
	}
	return nil
}

// ignoreDone drops sql.ErrTxDone: a callback may have ended the transaction
// itself.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
