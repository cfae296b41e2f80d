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
// none running and ending when no caller waits: it begins, hands the
// transaction to each waiting caller in turn (the caller runs its callback
// on its own goroutine, so a panic stays the caller's), and commits. Safe
// for concurrent use.
type committer struct {
	mu      sync.Mutex
	queue   []*member // the callers waiting for their turn, oldest first
	running bool      // the driving goroutine runs
	// written counts the body bytes the group in progress has sent (the
	// pre-update hook): the group's byte bound.
	written atomic.Int64
	commits atomic.Int64 // the groups committed
}

// The states of a member: waiting for its turn, taken by the committer
// (its turn is coming), or gone (its ctx ended first).
const (
	memberWaiting int32 = iota
	memberTaken
	memberGone
)

// member is one caller of Store.Tx in the committer's queue.
type member struct {
	state atomic.Int32
	turn  chan turn     // committer to caller: run now (or the begin's error)
	ran   chan stepDone // caller to committer: the step ended
	done  chan error    // committer to caller: the group's commit, for a kept step
}

// turn is the transaction a member's step runs in, or why there is none.
type turn struct {
	tx  *sql.Tx
	err error
}

// stepDone is how a member's step ended: kept (released into the group's
// transaction, waiting for its commit), or not (rolled back to its
// savepoint); broken when the transaction itself failed (a savepoint could
// not be taken, released or rolled back to), which ends the group.
type stepDone struct {
	kept   bool
	broken error
}

// join queues a new member, starting the driving goroutine when none runs.
func (s *Store) join() *member {
	m := &member{turn: make(chan turn, 1), ran: make(chan stepDone, 1), done: make(chan error, 1)}
	c := &s.group
	c.mu.Lock()
	c.queue = append(c.queue, m)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go s.drive()
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

// drive runs group commits until no caller waits. Between two groups it
// yields the processor once: the callers the commit just answered run and,
// when they call again at once (producers in a loop), join the next group
// instead of each making a group of its own. A yield is no timer: when no
// other goroutine is runnable it returns at once.
func (s *Store) drive() {
	for !s.group.idle() {
		s.commitGroup()
		runtime.Gosched()
	}
}

// commitGroup runs one group: begin, each waiting member's step in turn
// (up to the bounds), one commit, and every kept member told its outcome.
// A begin that fails fails every member waiting then.
func (s *Store) commitGroup() {
	c := &s.group
	// No ctx to wait with: the group is no caller's. database/sql ends the
	// wait with an error when Close closes the handle.
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		if s.isClosed() {
			err = ErrClosed
		} else {
			err = fmt.Errorf("begin: %w", err)
		}
		for m := c.take(); m != nil; m = c.take() {
			m.turn <- turn{err: err}
		}
		return
	}
	c.written.Store(0)
	var kept []*member
	var broken error
	for n := 0; n < groupMaxCallers && c.written.Load() < groupMaxBytes; n++ {
		m := c.take()
		if m == nil {
			break
		}
		m.turn <- turn{tx: tx}
		d := <-m.ran
		if d.broken != nil {
			broken = d.broken
			break
		}
		if d.kept {
			kept = append(kept, m)
		}
	}
	switch {
	case broken != nil:
		err = errors.Join(fmt.Errorf("group transaction failed in another caller's step: %w", broken), ignoreDone(tx.Rollback()))
	case len(kept) == 0:
		err = ignoreDone(tx.Rollback())
	default:
		if err = tx.Commit(); err == nil {
			c.commits.Add(1)
		} else {
			if s.isClosed() && !errors.Is(err, ErrClosed) {
				err = errors.Join(ErrClosed, err)
			}
			err = fmt.Errorf("commit: %w", err)
		}
	}
	for _, m := range kept {
		m.done <- err
	}
}

// wait waits for m's turn until ctx ends; then m leaves the queue and ctx's
// error is returned, unless the committer took m just then: its turn comes
// and is run (the step sees ctx ended and runs nothing).
func (m *member) wait(ctx context.Context) (turn, error) {
	select {
	case t := <-m.turn:
		return t, nil
	case <-ctx.Done():
		if m.state.CompareAndSwap(memberWaiting, memberGone) {
			return turn{}, fmt.Errorf("begin: waiting for the connection: %w", ctx.Err())
		}
		return <-m.turn, nil
	}
}

// step runs fn, the caller's callback, in a savepoint of tx: released into
// the group's transaction when fn returns nil with ctx still alive (kept:
// the caller then waits for the group's commit), rolled back to otherwise,
// and when fn panics (the panic goes on after the rollback). What the hooks
// recorded of the step (metrics, settlements) is dropped with it.
func (s *Store) step(ctx context.Context, m *member, tx *sql.Tx, fn func(tx *Tx) error) (kept bool, err error) {
	var d stepDone
	defer func() { m.ran <- d }() // last: after a panic's rollback too
	if err := ctx.Err(); err != nil {
		return false, err
	}
	stmtCtx := context.WithoutCancel(ctx)
	mark := s.markStep()
	if _, err := tx.ExecContext(stmtCtx, "SAVEPOINT mqlite_step"); err != nil {
		d.broken = fmt.Errorf("savepoint: %w", err)
		return false, d.broken
	}
	returned := false
	defer func() {
		if !returned { // fn panicked
			d.broken = s.rollbackStep(stmtCtx, tx, mark)
		}
	}()
	txCtx, end := markTx(stmtCtx, &txMark{store: s})
	defer end() // a panicking fn's transaction ends too
	ferr := fn(&Tx{tx: tx, ctx: txCtx})
	end()
	returned = true
	if ferr == nil {
		ferr = ctx.Err()
	}
	if ferr != nil {
		d.broken = s.rollbackStep(stmtCtx, tx, mark)
		return false, errors.Join(ferr, ignoreDone(d.broken)) // fn may have ended tx itself
	}
	if _, err := tx.ExecContext(stmtCtx, "RELEASE mqlite_step"); err != nil {
		d.broken = fmt.Errorf("release savepoint: %w", err)
		return false, d.broken
	}
	d.kept = true
	return true, nil
}

// rollbackStep undoes a step: its rows (rolled back to its savepoint, which
// is then released) and what the hooks recorded since mark.
func (s *Store) rollbackStep(ctx context.Context, tx *sql.Tx, mark stepMark) error {
	s.undoStep(mark)
	for _, q := range [...]string{"ROLLBACK TO mqlite_step", "RELEASE mqlite_step"} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
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
