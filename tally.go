package mqlite

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mqlite/mqlite/internal/engine"
)

// The message states a tally counts, in the order of queueTally.states.
var tallyStates = [...]State{StateActive, StateScheduled, StateLocked, StateDeferred, StateDeadLettered}

// stateIndex is the index of state in tallyStates, or -1 ("" for no row,
// and any state mqlite never writes).
func stateIndex(state string) int {
	for i, s := range tallyStates {
		if string(s) == state {
			return i
		}
	}
	return -1
}

// cause is what the transaction in progress does, as far as the tally
// needs to know to name a row's change: the pre-update hook sees a locked
// row go back to active whether Abandon put it there or the reaper did.
// The store's methods set it inside their own transaction (tally.tag); the
// commit and rollback hooks clear it. One connection means one transaction
// at a time, so the cause always belongs to the rows being written.
type cause uint8

const (
	causeNone cause = iota
	causeReceive
	causeComplete
	causeAbandon
	causeReject
)

// causeOf maps a settlement to its cause.
func causeOf(op engine.Op) cause {
	switch op {
	case engine.OpComplete:
		return causeComplete
	case engine.OpAbandon, engine.OpRelease:
		return causeAbandon
	case engine.OpReject:
		return causeReject
	}
	return causeNone
}

// queueDelta is what one transaction did to one queue.
type queueDelta struct {
	queue    string
	states   [len(tallyStates)]int64
	bytes    int64 // body bytes sent less those deleted
	counters QueueCounters
	// exact, when set, is the queue's counts per state and bytes as the
	// transaction read them from the table after its last write to the
	// queue (Stats): the commit takes them instead of adding its own.
	exact *exactCounts
}

// exactCounts is a queue's counts per state and body bytes as read from
// the table.
type exactCounts struct {
	states [len(tallyStates)]int64
	bytes  int64
}

// exactOf sums engine.Stats' figures into exactCounts.
func exactOf(per map[string]engine.StateStats) exactCounts {
	var e exactCounts
	for state, v := range per {
		if i := stateIndex(state); i >= 0 {
			e.states[i] = v.Count
		}
		e.bytes += v.Bytes
	}
	return e
}

// queueTally is one queue's committed counts.
type queueTally struct {
	states        [len(tallyStates)]int64
	bytes         int64
	paused        bool
	counters      QueueCounters
	claim, settle histogram
}

// tally keeps the per-queue counts of Store.Metrics: the messages per state
// and the event counters, from the rows the connection's pre-update hook
// reports. A transaction's changes wait in pending and are applied when it
// commits, dropped when it rolls back, so the counts are always those of
// the last commit and a scrape never reads a table. Seeded once at Open.
// Safe for concurrent use: the hooks run on the connection's goroutine, the
// readers anywhere.
type tally struct {
	mu      sync.Mutex
	on      bool // seeded: before that (migrations, recovery) rows are ignored
	queues  map[string]*queueTally
	pending []queueDelta // the open transaction's, one per queue touched
	created []string
	dropped []string
	cause   cause
}

// seed counts the messages of every queue once, from the state indexes
// (engine.Stats), and turns the tally on. It runs inside Open, before any
// other statement can run on the connection.
func (t *tally) seed(ctx context.Context, db engine.DBTX) error {
	qs, err := engine.ListQueues(ctx, db)
	if err != nil {
		return fmt.Errorf("seed counts: %w", err)
	}
	seeded := make(map[string]*queueTally, len(qs))
	for _, q := range qs {
		per, err := engine.Stats(ctx, db, q.Name)
		if err != nil {
			return fmt.Errorf("seed counts: %w", err)
		}
		e := exactOf(per)
		seeded[q.Name] = &queueTally{states: e.states, bytes: e.bytes, paused: q.PausedAt != 0}
	}
	t.mu.Lock()
	t.queues, t.on = seeded, true
	t.mu.Unlock()
	return nil
}

// tag names the cause of the rows the current transaction writes next.
func (t *tally) tag(c cause) {
	t.mu.Lock()
	t.cause = c
	t.mu.Unlock()
}

// delta returns the pending delta of queue; t.mu is held.
func (t *tally) delta(queue string) *queueDelta {
	for i := range t.pending {
		if t.pending[i].queue == queue {
			return &t.pending[i]
		}
	}
	t.pending = append(t.pending, queueDelta{queue: queue})
	return &t.pending[len(t.pending)-1]
}

// change records one row of messages changing state (the pre-update hook).
func (t *tally) change(c engine.RowChange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on || c.Queue == "" {
		return
	}
	d := t.delta(c.Queue)
	moveState(&d.states, &d.bytes, c)
	if d.exact != nil {
		// Counts read (Stats) earlier in the transaction, a group commit's
		// step before this write: the write moves them too.
		moveState(&d.exact.states, &d.exact.bytes, c)
	}
	n := &d.counters
	switch {
	case c.Old == "":
		n.Sent++
	case c.New == string(StateLocked),
		c.New == "" && c.Old == string(StateActive) && t.cause == causeReceive: // receive-and-delete
		n.Received++
	}
	if c.Old == string(StateLocked) {
		switch {
		case c.New == "":
			if t.cause == causeComplete {
				n.Completed++
			}
		case c.New == string(StateDeferred):
		case t.cause == causeAbandon:
			n.Abandoned++
		case t.cause == causeReject:
			n.Rejected++
		default:
			// The lease ended with no settlement: the reaper, a claim or a
			// Stats catch-up put the row back (or dead-lettered it).
			n.LockLost++
		}
	}
	if c.New == string(StateDeadLettered) {
		n.DeadLettered++
	}
}

// moveState applies a row's change of state to counts per state and bytes.
func moveState(states *[len(tallyStates)]int64, bytes *int64, c engine.RowChange) {
	if i := stateIndex(c.Old); i >= 0 {
		states[i]--
	}
	if i := stateIndex(c.New); i >= 0 {
		states[i]++
	}
	switch {
	case c.Old == "":
		*bytes += c.Bytes
	case c.New == "":
		*bytes -= c.Bytes
	}
}

// tallyMark is where the open transaction's pending changes stood when a
// step of a group commit began (mark), for undo.
type tallyMark struct {
	pending          []queueDelta
	created, dropped int
}

// mark copies the open transaction's pending changes and clears its cause:
// a group commit's step begins, which names its own.
func (t *tally) mark() tallyMark {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := tallyMark{pending: make([]queueDelta, len(t.pending)), created: len(t.created), dropped: len(t.dropped)}
	for i, d := range t.pending {
		if d.exact != nil {
			e := *d.exact
			d.exact = &e
		}
		m.pending[i] = d
	}
	t.cause = causeNone
	return m
}

// undo brings the pending changes back to m: the step that followed it
// rolled back to its savepoint.
func (t *tally) undo(m tallyMark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.pending)
	t.pending = append(t.pending[:0], m.pending...)
	t.created, t.dropped, t.cause = t.created[:m.created], t.dropped[:m.dropped], causeNone
}

// correct takes the counts per state of queue as the current transaction
// read them from the table, after its last write to the queue, as the
// tally's: which heals any drift (a savepoint rolled back inside a caller's
// transaction that then committed leaves rows the hook reported and the file
// no longer holds). Stats calls it, so a Stats of a queue corrects that
// queue's counts for free. The store has one connection, so nothing else
// commits while the transaction runs: when it wrote nothing to queue, the
// counts read are the committed ones and are taken at once (a transaction
// that wrote nothing fires no commit hook); otherwise its commit takes them.
func (t *tally) correct(queue string, per map[string]engine.StateStats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	exact := exactOf(per)
	for i := range t.pending {
		if d := &t.pending[i]; d.queue == queue {
			d.exact = &exact
			return
		}
	}
	if qt := t.queues[queue]; qt != nil {
		qt.states, qt.bytes = exact.states, exact.bytes
	}
}

// redelivered records n redeliveries among the rows the current
// transaction claimed on queue: the claim path counts them from the rows it
// returns, which carry their delivery count (the hook does not read it, to
// stay cheap). A Receive that replayed an attempt claimed nothing in this
// transaction and counts nothing.
func (t *tally) redelivered(queue string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on || n == 0 {
		return
	}
	for i := range t.pending {
		if d := &t.pending[i]; d.queue == queue && d.counters.Received > 0 {
			d.counters.Redelivered += n
		}
	}
}

// create records a queue created (the pre-update hook on queues).
func (t *tally) create(queue string) {
	t.mu.Lock()
	if t.on {
		t.created = append(t.created, queue)
	}
	t.mu.Unlock()
}

// drop records a queue deleted (the pre-update hook on queues).
func (t *tally) drop(queue string) {
	t.mu.Lock()
	if t.on {
		t.dropped = append(t.dropped, queue)
	}
	t.mu.Unlock()
}

// commit applies the transaction's changes (the commit hook).
func (t *tally) commit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.created {
		if t.queues[q] == nil {
			t.queues[q] = &queueTally{}
		}
	}
	for i := range t.pending {
		d := &t.pending[i]
		qt := t.queues[d.queue]
		if qt == nil {
			qt = &queueTally{}
			t.queues[d.queue] = qt
		}
		if d.exact != nil {
			qt.states, qt.bytes = d.exact.states, d.exact.bytes
		} else {
			for j := range qt.states {
				qt.states[j] += d.states[j]
			}
			qt.bytes += d.bytes
		}
		qt.counters.add(d.counters)
	}
	for _, q := range t.dropped {
		delete(t.queues, q)
	}
	t.reset()
}

// rollback drops the transaction's changes (the rollback hook).
func (t *tally) rollback() {
	t.mu.Lock()
	t.reset()
	t.mu.Unlock()
}

// reset empties the pending changes, keeping their memory; t.mu is held.
func (t *tally) reset() {
	clear(t.pending) // no queue name or exact count outlives its transaction
	t.pending, t.created, t.dropped, t.cause = t.pending[:0], t.created[:0], t.dropped[:0], causeNone
}

// Which duration histogram observe adds to.
type durationKind uint8

const (
	claimDuration durationKind = iota
	settleDuration
)

// observe adds the time since start (the wall clock's: a duration of work,
// not of the store's Clock) to the queue's histogram of kind; a queue the
// tally does not know (deleted, or never there) is skipped.
func (t *tally) observe(queue string, kind durationKind, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	qt := t.queues[queue]
	if qt == nil {
		return
	}
	h := &qt.claim
	if kind == settleDuration {
		h = &qt.settle
	}
	h.observe(d)
}

// counters returns the queue's counters (zero for an unknown queue).
func (t *tally) counters(queue string) QueueCounters {
	t.mu.Lock()
	defer t.mu.Unlock()
	if qt := t.queues[queue]; qt != nil {
		return qt.counters
	}
	return QueueCounters{}
}

// paused records a queue paused or resumed (after the commit).
func (t *tally) paused(queue string, on bool) {
	t.mu.Lock()
	if qt := t.queues[queue]; qt != nil {
		qt.paused = on
	}
	t.mu.Unlock()
}

// names returns the names of every queue, sorted.
func (t *tally) names() []string {
	t.mu.Lock()
	out := make([]string, 0, len(t.queues))
	for name := range t.queues {
		out = append(out, name)
	}
	t.mu.Unlock()
	sort.Strings(out)
	return out
}

// snapshot returns every queue's counts, sorted by queue name.
func (t *tally) snapshot() []QueueMetrics {
	t.mu.Lock()
	out := make([]QueueMetrics, 0, len(t.queues))
	for name, qt := range t.queues {
		out = append(out, QueueMetrics{
			Queue: name, Active: qt.states[0], Scheduled: qt.states[1], Locked: qt.states[2],
			Deferred: qt.states[3], DeadLettered: qt.states[4], Bytes: qt.bytes, Paused: qt.paused, Counters: qt.counters,
			Claim: qt.claim.export(), Settle: qt.settle.export(),
		})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out
}
