package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// The bounds of one group commit: how many callers of Store.Tx run in one
// transaction, and how many body bytes they may send in it before the
// group commits and the callers still waiting go to the next one.
const (
	groupMaxCallers = 64
	groupMaxBytes   = 4 << 20
)

// committer runs the callers of Store.Tx in group commits: the callers that
// arrive while a transaction runs or commits wait for the next one, which
// runs each caller's callback, one after the other, in a savepoint of its
// own, and commits them all with one COMMIT. Under SyncFull that is one
// fsync for the group instead of one per caller.
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
type committer struct {
	mu      sync.Mutex
	queue   []*member // the callers waiting for their turn, oldest first
	running bool      // a driving goroutine runs
	// written counts the body bytes the group in progress has sent (the
	// pre-update hook): the group's byte bound.
	written atomic.Int64
	commits atomic.Int64 // the groups committed
}

// The states of a member: waiting for its turn, taken by the committer
// (its callback runs or has run), or gone (its ctx ended first).
const (
	memberWaiting int32 = iota
	memberTaken
	memberGone
)

// member is one caller of Store.Tx in the committer's queue.
type member struct {
	ctx   context.Context
	fn    func(tx *Tx) error
	state atomic.Int32
	done  chan outcome // committer to caller, once
}

// outcome is what a caller of Store.Tx gets: its error (fn's, ctx's, the
// commit's), or the value its callback panicked with.
type outcome struct {
	err      error
	panicked any
}

// errGoexit is the outcome of a callback that called runtime.Goexit.
var errGoexit = errors.New("the callback called runtime.Goexit (t.FailNow?); its work is rolled back")

// join queues a new member, starting the driving goroutine when none runs.
func (s *Store) join(ctx context.Context, fn func(tx *Tx) error) *member {
	m := &member{ctx: ctx, fn: fn, done: make(chan outcome, 1)}
	c := &s.group
	c.mu.Lock()
	c.queue = append(c.queue, m)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go s.drive(nil)
	}
	return m
}

// take returns the oldest member still waiting, now taken, or nil when none
// waits.
func (c *committer) take() *member {
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
func (c *committer) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		return false
	}
	c.running = false
	return true
}

// group is one group commit in progress.
type group struct {
	tx     *sql.Tx   // nil after a bare step rolled it back: the next step begins one
	steps  int       // the members taken
	kept   []*member // the members whose work is in tx, waiting for the commit
	broken error     // tx failed in a step: the group rolls back
	bare   bool      // the step running has no savepoint (kept is empty)
}

// drive runs group commits until no caller waits, first finishing g when
// it is not nil (a group whose driving goroutine a callback ended). Between
// two groups it yields the processor once: the callers the commit just
// answered run and, when they call again at once (producers in a loop),
// join the next group instead of each making a group of its own. A yield
// is no timer: when no other goroutine is runnable it returns at once.
func (s *Store) drive(g *group) {
	if g != nil {
		s.runGroup(g)
		runtime.Gosched()
	}
	for !s.group.idle() {
		if g := s.beginGroup(); g != nil {
			s.runGroup(g)
		}
		runtime.Gosched()
	}
}

// beginGroup begins a group's transaction. A begin that fails fails every
// member waiting then, and returns nil.
func (s *Store) beginGroup() *group {
	// No ctx to wait with: the group is no caller's. database/sql ends the
	// wait with an error when Close closes the handle.
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		err = s.beginError(err)
		for m := s.group.take(); m != nil; m = s.group.take() {
			m.done <- outcome{err: err}
		}
		return nil
	}
	s.group.written.Store(0)
	return &group{tx: tx}
}

// beginError is the error of a group's BEGIN that failed: ErrClosed once
// Close has begun.
func (s *Store) beginError(err error) error {
	if s.isClosed() {
		return ErrClosed
	}
	return fmt.Errorf("begin: %w", err)
}

// runGroup runs the steps of the members waiting, up to the bounds, then
// commits (or rolls back) g and tells every kept member the outcome.
func (s *Store) runGroup(g *group) {
	c := &s.group
	for g.broken == nil && g.steps < groupMaxCallers && c.written.Load() < groupMaxBytes {
		m := c.take()
		if m == nil {
			break
		}
		g.steps++
		s.step(g, m)
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
		// A Receive sleeps for a message the group made claimable:
		// claim it for that Receive before the commit, hand it over after.
		reserved := s.handoffs.reserve(s.notify.Marked)
		var claims []handoffClaim
		if len(reserved) > 0 {
			claims = s.handOff(context.Background(), g.tx, reserved)
		}
		err = g.tx.Commit()
		s.handoffs.end(reserved, claims, err == nil)
		if err == nil {
			c.commits.Add(1)
		} else {
			if s.isClosed() && !errors.Is(err, ErrClosed) {
				err = errors.Join(ErrClosed, err)
			}
			err = fmt.Errorf("commit: %w", err)
		}
	}
	for _, m := range g.kept {
		m.done <- outcome{err: err}
	}
}

// wait waits for m's outcome. When ctx ends before m's turn, m leaves the
// queue and ctx's error is returned; once its callback runs, the wait goes
// on: the callback must not outlive its caller's call, and once it returned
// nil its work is in the group's transaction, whose commit is the outcome.
func (m *member) wait() outcome {
	select {
	case o := <-m.done:
		return o
	case <-m.ctx.Done():
		if m.state.CompareAndSwap(memberWaiting, memberGone) {
			return outcome{err: fmt.Errorf("begin: waiting for the connection: %w", m.ctx.Err())}
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
func (s *Store) step(g *group, m *member) {
	if err := m.ctx.Err(); err != nil {
		m.done <- outcome{err: err}
		return
	}
	if g.tx == nil {
		tx, err := s.db.BeginTx(context.Background(), nil)
		if err != nil {
			g.broken = s.beginError(err)
			m.done <- outcome{err: g.broken}
			return
		}
		g.tx = tx
	}
	stmtCtx := context.WithoutCancel(m.ctx)
	mark := s.markStep()
	g.bare = len(g.kept) == 0
	if !g.bare {
		if _, err := g.tx.ExecContext(stmtCtx, "SAVEPOINT mqlite_step"); err != nil {
			g.broken = fmt.Errorf("savepoint: %w", err)
			m.done <- outcome{err: g.broken}
			return
		}
	}
	txCtx, end := markTx(stmtCtx, &txMark{store: s})
	var ferr error
	var panicked any
	exited := true // until fn returns or panics: runtime.Goexit ends this goroutine
	defer func() {
		if exited {
			end()
			if rb := s.rollbackStep(stmtCtx, g, mark); rb != nil {
				g.broken = rb
			}
			m.done <- outcome{err: errGoexit}
			go s.drive(g)
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
		ferr = m.fn(&Tx{tx: g.tx, ctx: txCtx})
		exited = false
	}()
	end()
	if panicked != nil {
		if rb := s.rollbackStep(stmtCtx, g, mark); rb != nil {
			g.broken = rb
		}
		m.done <- outcome{panicked: panicked}
		return
	}
	if ferr == nil {
		ferr = m.ctx.Err()
	}
	if ferr != nil {
		rb := s.rollbackStep(stmtCtx, g, mark)
		g.broken = rb
		m.done <- outcome{err: errors.Join(ferr, ignoreDone(rb))} // fn may have ended tx itself
		return
	}
	if !g.bare {
		if _, err := g.tx.ExecContext(stmtCtx, "RELEASE mqlite_step"); err != nil {
			g.broken = fmt.Errorf("release savepoint: %w", err)
			m.done <- outcome{err: g.broken}
			return
		}
	}
	g.kept = append(g.kept, m)
}

// rollbackStep undoes g's step: its rows (rolled back to its savepoint,
// which is then released; a bare step's whole transaction, after which g
// has none) and what the hooks recorded since mark.
func (s *Store) rollbackStep(ctx context.Context, g *group, mark stepMark) error {
	s.undoStep(mark)
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

// stepMark is what the hooks had recorded of the open transaction when a
// step began.
type stepMark struct {
	tally   tallyMark
	settled int
}

// markStep records where the open transaction's hook records stand, for
// undoStep.
func (s *Store) markStep() stepMark {
	s.txSettled.mu.Lock()
	n := len(s.txSettled.locks)
	s.txSettled.mu.Unlock()
	return stepMark{tally: s.tally.mark(), settled: n}
}

// undoStep drops what the hooks recorded since mark: the rows a step rolled
// back to its savepoint are not counted, and its settlements not applied,
// when the group commits. A wake-up it marked stays: waking a receiver for
// nothing costs one look, and a due bound lowered too far one early probe.
func (s *Store) undoStep(mark stepMark) {
	s.tally.undo(mark.tally)
	s.txSettled.mu.Lock()
	clear(s.txSettled.locks[mark.settled:])
	s.txSettled.locks = s.txSettled.locks[:mark.settled]
	s.txSettled.mu.Unlock()
}
