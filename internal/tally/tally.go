// Package tally keeps the per-queue counts of Store.Metrics in memory: the
// messages per state and bytes, the event counters and the claim and settle
// durations, from the rows the connection's pre-update hook reports. A
// transaction's changes wait until its commit (applied) or rollback
// (dropped), so the counts are always those of the last commit and a scrape
// never reads a table.
//
// The package knows rows by their state names and nothing of the engine or
// of the store: the store converts its rows into Change, its counts per
// state into Exact, and Counters and Histogram into its own exported types.
package tally

import (
	"sort"
	"sync"
	"time"
)

// States are the message states a tally counts, in the order of the
// counts of Exact and Queue: active, scheduled, locked, deferred, dead
// letters.
var States = [...]string{"active", "scheduled", "locked", "deferred", "dead_lettered"}

// The names of the states whose moves the counters tell apart.
const (
	stateActive       = "active"
	stateLocked       = "locked"
	stateDeferred     = "deferred"
	stateDeadLettered = "dead_lettered"
)

// stateIndex is the index of state in States, or -1 ("" for no row, and
// any state mqlite never writes).
func stateIndex(state string) int {
	for i, s := range States {
		if s == state {
			return i
		}
	}
	return -1
}

// Cause is what the transaction in progress does, as far as the tally
// needs to know to name a row's change: the pre-update hook sees a locked
// row go back to active whether Abandon put it there or the reaper did.
// The store's methods set it inside their own transaction (Tag); the commit
// and rollback hooks clear it. One connection means one transaction at a
// time, so the cause always belongs to the rows being written.
type Cause uint8

// The causes a transaction tags its rows with.
const (
	None     Cause = iota // no settlement or claim: a send, a sweep
	Receive               // a claim (peek-lock or receive-and-delete)
	Complete              // a completion
	Abandon               // an abandon or a release
	Reject                // a rejection
)

// Change is one row of messages changing state, as the pre-update hook
// reports it: Old is "" for a row inserted, New "" for one deleted; Bytes
// is the row's body length.
type Change struct {
	Queue    string
	Old, New string
	Bytes    int64
}

// Counters counts the events of one queue since the tally was seeded (the
// store's QueueCounters, field for field).
type Counters struct {
	Sent         int64
	Received     int64
	Completed    int64
	Abandoned    int64
	Rejected     int64
	DeadLettered int64
	LockLost     int64
	Redelivered  int64
}

func (c *Counters) add(d Counters) {
	c.Sent += d.Sent
	c.Received += d.Received
	c.Completed += d.Completed
	c.Abandoned += d.Abandoned
	c.Rejected += d.Rejected
	c.DeadLettered += d.DeadLettered
	c.LockLost += d.LockLost
	c.Redelivered += d.Redelivered
}

// Exact is a queue's counts per state (in the order of States) and body
// bytes as read from the table.
type Exact struct {
	States [len(States)]int64
	Bytes  int64
}

// Put takes count as the messages of state and adds their body bytes; a
// state the tally does not count adds its bytes only.
func (e *Exact) Put(state string, count, bytes int64) {
	if i := stateIndex(state); i >= 0 {
		e.States[i] = count
	}
	e.Bytes += bytes
}

// Seed is one queue's counts at Open.
type Seed struct {
	Queue  string
	Counts Exact
	Paused bool
}

// Queue is one queue's committed counts, as Snapshot returns them.
type Queue struct {
	Name                                              string
	Active, Scheduled, Locked, Deferred, DeadLettered int64
	Bytes                                             int64
	Paused                                            bool
	Counters                                          Counters
	Claim, Settle                                     Histogram
}

// queueDelta is what one transaction did to one queue.
type queueDelta struct {
	queue    string
	states   [len(States)]int64
	bytes    int64 // body bytes sent less those deleted
	counters Counters
	// exact, when set, is the queue's counts per state and bytes as the
	// transaction read them from the table after its last write to the
	// queue (Stats): the commit takes them instead of adding its own.
	exact *Exact
}

// queueTally is one queue's committed counts.
type queueTally struct {
	states        [len(States)]int64
	bytes         int64
	paused        bool
	counters      Counters
	claim, settle histogram
}

// Tally keeps the per-queue counts: the messages per state and the event
// counters, from the rows the connection's pre-update hook reports. Seeded
// once at Open. The zero value is ready (and off until Seed). Safe for
// concurrent use: the hooks run on the connection's goroutine, the readers
// anywhere.
type Tally struct {
	mu      sync.Mutex
	on      bool // seeded: before that (migrations, recovery) rows are ignored
	queues  map[string]*queueTally
	pending []queueDelta // the open transaction's, one per queue touched
	created []string
	dropped []string
	cause   Cause
}

// Seed takes the counts of every queue, read once from the state indexes,
// and turns the tally on. It runs inside Open, before any other statement
// can run on the connection.
func (t *Tally) Seed(queues []Seed) {
	seeded := make(map[string]*queueTally, len(queues))
	for _, q := range queues {
		seeded[q.Queue] = &queueTally{states: q.Counts.States, bytes: q.Counts.Bytes, paused: q.Paused}
	}
	t.mu.Lock()
	t.queues, t.on = seeded, true
	t.mu.Unlock()
}

// Refresh takes the counts of every queue read again from a database that
// other processes write too (PostgreSQL): the states, bytes and pause of
// each queue become queues', a queue missing from queues goes, and the
// event counters and latencies, which are this process's own, stay.
func (t *Tally) Refresh(queues []Seed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := make(map[string]*queueTally, len(queues))
	for _, q := range queues {
		qt := t.queues[q.Queue]
		if qt == nil {
			qt = &queueTally{}
		}
		qt.states, qt.bytes, qt.paused = q.Counts.States, q.Counts.Bytes, q.Paused
		next[q.Queue] = qt
	}
	t.queues, t.on = next, true
}

// Tag names the cause of the rows the current transaction writes next.
func (t *Tally) Tag(c Cause) {
	t.mu.Lock()
	t.cause = c
	t.mu.Unlock()
}

// delta returns the pending delta of queue; t.mu is held.
func (t *Tally) delta(queue string) *queueDelta {
	for i := range t.pending {
		if t.pending[i].queue == queue {
			return &t.pending[i]
		}
	}
	t.pending = append(t.pending, queueDelta{queue: queue})
	return &t.pending[len(t.pending)-1]
}

// Change records one row of messages changing state (the pre-update hook).
func (t *Tally) Change(c Change) {
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
		moveState(&d.exact.States, &d.exact.Bytes, c)
	}
	n := &d.counters
	switch {
	case c.Old == "":
		n.Sent++
	case c.New == stateLocked,
		c.New == "" && c.Old == stateActive && t.cause == Receive: // receive-and-delete
		n.Received++
	}
	if c.Old == stateLocked {
		switch {
		case c.New == "":
			if t.cause == Complete {
				n.Completed++
			}
		case c.New == stateDeferred:
		case t.cause == Abandon:
			n.Abandoned++
		case t.cause == Reject:
			n.Rejected++
		default:
			// The lease ended with no settlement: the reaper, a claim or a
			// Stats catch-up put the row back (or dead-lettered it).
			n.LockLost++
		}
	}
	if c.New == stateDeadLettered {
		n.DeadLettered++
	}
}

// moveState applies a row's change of state to counts per state and bytes.
func moveState(states *[len(States)]int64, bytes *int64, c Change) {
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

// Mark is where the open transaction's pending changes stood when a step
// of a group commit began (Tally.Mark), for Undo.
type Mark struct {
	pending          []queueDelta
	created, dropped int
}

// Mark copies the open transaction's pending changes and clears its cause:
// a group commit's step begins, which names its own.
func (t *Tally) Mark() Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := Mark{pending: make([]queueDelta, len(t.pending)), created: len(t.created), dropped: len(t.dropped)}
	for i, d := range t.pending {
		if d.exact != nil {
			e := *d.exact
			d.exact = &e
		}
		m.pending[i] = d
	}
	t.cause = None
	return m
}

// Undo brings the pending changes back to m: the step that followed it
// rolled back to its savepoint.
func (t *Tally) Undo(m Mark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.pending)
	t.pending = append(t.pending[:0], m.pending...)
	t.created, t.dropped, t.cause = t.created[:m.created], t.dropped[:m.dropped], None
}

// Correct takes the counts per state of queue as the current transaction
// read them from the table, after its last write to the queue, as the
// tally's: which heals any drift (a savepoint rolled back inside a caller's
// transaction that then committed leaves rows the hook reported and the file
// no longer holds). Stats calls it, so a Stats of a queue corrects that
// queue's counts for free. The store has one connection, so nothing else
// commits while the transaction runs: when it wrote nothing to queue, the
// counts read are the committed ones and are taken at once (a transaction
// that wrote nothing fires no commit hook); otherwise its commit takes them.
func (t *Tally) Correct(queue string, exact Exact) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	for i := range t.pending {
		if d := &t.pending[i]; d.queue == queue {
			d.exact = &exact
			return
		}
	}
	if qt := t.queues[queue]; qt != nil {
		qt.states, qt.bytes = exact.States, exact.Bytes
	}
}

// Redelivered records n redeliveries among the rows the current
// transaction claimed on queue: the claim path counts them from the rows it
// returns, which carry their delivery count (the hook does not read it, to
// stay cheap). A Receive that replayed an attempt claimed nothing in this
// transaction and counts nothing.
func (t *Tally) Redelivered(queue string, n int64) {
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

// Create records a queue created (the pre-update hook on queues).
func (t *Tally) Create(queue string) {
	t.mu.Lock()
	if t.on {
		t.created = append(t.created, queue)
	}
	t.mu.Unlock()
}

// Drop records a queue deleted (the pre-update hook on queues).
func (t *Tally) Drop(queue string) {
	t.mu.Lock()
	if t.on {
		t.dropped = append(t.dropped, queue)
	}
	t.mu.Unlock()
}

// Commit applies the transaction's changes (the commit hook).
func (t *Tally) Commit() {
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
			qt.states, qt.bytes = d.exact.States, d.exact.Bytes
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

// Rollback drops the transaction's changes (the rollback hook).
func (t *Tally) Rollback() {
	t.mu.Lock()
	t.reset()
	t.mu.Unlock()
}

// reset empties the pending changes, keeping their memory; t.mu is held.
func (t *Tally) reset() {
	clear(t.pending) // no queue name or exact count outlives its transaction
	t.pending, t.created, t.dropped, t.cause = t.pending[:0], t.created[:0], t.dropped[:0], None
}

// Duration is which duration histogram Observe adds to.
type Duration uint8

// The duration histograms of a queue.
const (
	Claim  Duration = iota // the claim transactions of Receive
	Settle                 // the settlements
)

// Observe adds the time since start (the wall clock's: a duration of work,
// not of the store's Clock) to the queue's histogram of kind; a queue the
// tally does not know (deleted, or never there) is skipped.
func (t *Tally) Observe(queue string, kind Duration, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	qt := t.queues[queue]
	if qt == nil {
		return
	}
	h := &qt.claim
	if kind == Settle {
		h = &qt.settle
	}
	h.observe(d)
}

// Counters returns the queue's counters (zero for an unknown queue).
func (t *Tally) Counters(queue string) Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	if qt := t.queues[queue]; qt != nil {
		return qt.counters
	}
	return Counters{}
}

// Paused records a queue paused or resumed (after the commit).
func (t *Tally) Paused(queue string, on bool) {
	t.mu.Lock()
	if qt := t.queues[queue]; qt != nil {
		qt.paused = on
	}
	t.mu.Unlock()
}

// Names returns the names of every queue, sorted.
func (t *Tally) Names() []string {
	t.mu.Lock()
	out := make([]string, 0, len(t.queues))
	for name := range t.queues {
		out = append(out, name)
	}
	t.mu.Unlock()
	sort.Strings(out)
	return out
}

// Snapshot returns every queue's counts, sorted by queue name.
func (t *Tally) Snapshot() []Queue {
	t.mu.Lock()
	out := make([]Queue, 0, len(t.queues))
	for name, qt := range t.queues {
		out = append(out, Queue{
			Name: name, Active: qt.states[0], Scheduled: qt.states[1], Locked: qt.states[2],
			Deferred: qt.states[3], DeadLettered: qt.states[4], Bytes: qt.bytes, Paused: qt.paused, Counters: qt.counters,
			Claim: qt.claim.export(), Settle: qt.settle.export(),
		})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
