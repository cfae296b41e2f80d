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
// is the row's body length. Cause, when not None, is what made the change
// as the statement itself knew it; None leaves it to the transaction's tag.
type Change struct {
	Queue       string
	Old, New    string
	Bytes       int64
	Cause       Cause
	Redelivered bool // a claim handed the row out again (it counts a redelivery)
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

// Key names the transaction a change belongs to: the connection it runs
// on (driver.TxKey), which runs one transaction at a time. A store with
// one connection (SQLite) reports everything as Key 0.
type Key = uint64

// txRecords is what one open transaction reported and its commit applies:
// its changes, one delta per queue touched, the queues it created and
// dropped, and the cause it tagged.
type txRecords struct {
	pending []queueDelta
	created []string
	dropped []string
	cause   Cause
}

// Tally keeps the per-queue counts: the messages per state and the event
// counters, from the rows the connection's pre-update hook reports. Seeded
// once at Open. The zero value is ready (and off until Seed). Safe for
// concurrent use: the hooks run on the connections' goroutines, the
// readers anywhere.
//
// The changes wait per transaction, by Key: a rollback drops its own
// transaction's records and no other's, a commit applies its own. Key 0
// (the one connection of SQLite) is a field, so its path costs no map.
type Tally struct {
	mu     sync.Mutex
	on     bool // seeded: before that (migrations, recovery) rows are ignored
	queues map[string]*queueTally
	one    txRecords          // Key 0's
	others map[Key]*txRecords // every other key's open transaction, made on its first record
	free   []*txRecords       // ended records of others, for reuse
}

// records returns the records of key, made if need be; t.mu is held.
func (t *Tally) records(key Key) *txRecords {
	if key == 0 {
		return &t.one
	}
	if r := t.others[key]; r != nil {
		return r
	}
	if t.others == nil {
		t.others = map[Key]*txRecords{}
	}
	var r *txRecords
	if n := len(t.free); n > 0 {
		r, t.free = t.free[n-1], t.free[:n-1]
	} else {
		r = &txRecords{}
	}
	t.others[key] = r
	return r
}

// lookup returns the records of key, nil for a key with none; t.mu is held.
func (t *Tally) lookup(key Key) *txRecords {
	if key == 0 {
		return &t.one
	}
	return t.others[key]
}

// end forgets the records of key, which ended; t.mu is held.
func (t *Tally) end(key Key, r *txRecords) {
	r.reset()
	if key != 0 {
		delete(t.others, key)
		if len(t.free) < 64 {
			t.free = append(t.free, r)
		}
	}
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

// Tag names the cause of the rows the current transaction writes next,
// on a store with one connection (Key 0). It names nothing on a pool,
// where the caller cannot name its transaction: there each change tells
// its own cause (Change.Cause, as the PostgreSQL engine's claims and
// settlements do) or its transaction's (TagKey), and a change that tells
// neither (a sweep's, a purge's) is counted as having none, whatever
// another transaction beside it does.
func (t *Tally) Tag(c Cause) {
	t.mu.Lock()
	t.one.cause = c
	t.mu.Unlock()
}

// TagKey names the cause of the rows the transaction of key writes next.
func (t *Tally) TagKey(key Key, c Cause) {
	t.mu.Lock()
	t.records(key).cause = c
	t.mu.Unlock()
}

// delta returns the pending delta of queue; t.mu is held.
func (r *txRecords) delta(queue string) *queueDelta {
	for i := range r.pending {
		if r.pending[i].queue == queue {
			return &r.pending[i]
		}
	}
	r.pending = append(r.pending, queueDelta{queue: queue})
	return &r.pending[len(r.pending)-1]
}

// Change records one row of messages changing state in the transaction
// of key (the pre-update hook).
func (t *Tally) Change(key Key, c Change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on || c.Queue == "" {
		return
	}
	r := t.records(key)
	cause := c.Cause
	if cause == None {
		cause = r.cause
	}
	d := r.delta(c.Queue)
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
		c.New == "" && c.Old == stateActive && cause == Receive: // receive-and-delete
		n.Received++
		if c.Redelivered {
			n.Redelivered++
		}
	}
	if c.Old == stateLocked {
		switch {
		case c.New == "":
			if cause == Complete {
				n.Completed++
			}
		case c.New == stateDeferred:
		case cause == Abandon:
			n.Abandoned++
		case cause == Reject:
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
// a group commit's step begins, which names its own. It is MarkKey of Key
// 0, the one connection's.
func (t *Tally) Mark() Mark { return t.MarkKey(0) }

// MarkKey is Mark of the transaction of key.
func (t *Tally) MarkKey(key Key) Mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(key)
	if r == nil {
		return Mark{}
	}
	m := Mark{pending: make([]queueDelta, len(r.pending)), created: len(r.created), dropped: len(r.dropped)}
	for i, d := range r.pending {
		if d.exact != nil {
			e := *d.exact
			d.exact = &e
		}
		m.pending[i] = d
	}
	r.cause = None
	return m
}

// Undo brings the pending changes back to m: the step that followed it
// rolled back to its savepoint. It is UndoKey of Key 0.
func (t *Tally) Undo(m Mark) { t.UndoKey(0, m) }

// UndoKey is Undo of the transaction of key.
func (t *Tally) UndoKey(key Key, m Mark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(key)
	if r == nil {
		return
	}
	clear(r.pending)
	r.pending = append(r.pending[:0], m.pending...)
	r.created, r.dropped, r.cause = r.created[:min(m.created, len(r.created))], r.dropped[:min(m.dropped, len(r.dropped))], None
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
// It is the transaction of Key 0's (on a pool, Metrics reads the counts
// again anyway: Refresh).
func (t *Tally) Correct(queue string, exact Exact) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	for i := range t.one.pending {
		if d := &t.one.pending[i]; d.queue == queue {
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
// transaction and counts nothing. The caller names no transaction: Key 0's
// is looked at first, then, on a pool, the first transaction that claimed
// on queue.
func (t *Tally) Redelivered(queue string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on || n == 0 {
		return
	}
	if t.one.redelivered(queue, n) {
		return
	}
	for _, r := range t.others {
		if r.redelivered(queue, n) {
			return
		}
	}
}

// redelivered adds n redeliveries to the delta of queue when it claimed,
// and reports whether it did.
func (r *txRecords) redelivered(queue string, n int64) bool {
	for i := range r.pending {
		if d := &r.pending[i]; d.queue == queue && d.counters.Received > 0 {
			d.counters.Redelivered += n
			return true
		}
	}
	return false
}

// Create records a queue created in the transaction of key (the
// pre-update hook on queues).
func (t *Tally) Create(key Key, queue string) {
	t.mu.Lock()
	if t.on {
		r := t.records(key)
		r.created = append(r.created, queue)
	}
	t.mu.Unlock()
}

// Drop records a queue deleted in the transaction of key (the pre-update
// hook on queues).
func (t *Tally) Drop(key Key, queue string) {
	t.mu.Lock()
	if t.on {
		r := t.records(key)
		r.dropped = append(r.dropped, queue)
	}
	t.mu.Unlock()
}

// Commit applies the changes of the transaction of key (the commit hook).
func (t *Tally) Commit(key Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(key)
	if r == nil {
		return
	}
	for _, q := range r.created {
		if t.queues[q] == nil {
			t.queues[q] = &queueTally{}
		}
	}
	for i := range r.pending {
		d := &r.pending[i]
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
	for _, q := range r.dropped {
		delete(t.queues, q)
	}
	t.end(key, r)
}

// Rollback drops the changes of the transaction of key (the rollback
// hook), and no other's.
func (t *Tally) Rollback(key Key) {
	t.mu.Lock()
	if r := t.lookup(key); r != nil {
		t.end(key, r)
	}
	t.mu.Unlock()
}

// Pending reports how many transactions hold records not yet applied or
// dropped: for the tests, which check that every one ended.
func (t *Tally) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.others)
	if len(t.one.pending)+len(t.one.created)+len(t.one.dropped) > 0 {
		n++
	}
	return n
}

// reset empties the pending changes, keeping their memory; t.mu is held.
func (r *txRecords) reset() {
	clear(r.pending) // no queue name or exact count outlives its transaction
	clear(r.created)
	clear(r.dropped)
	r.pending, r.created, r.dropped, r.cause = r.pending[:0], r.created[:0], r.dropped[:0], None
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
