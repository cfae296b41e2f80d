package driver

import "sync"

// ConnConfig configures the store's connection: the file, and the
// callbacks through which the engine tells the store what its statements
// did (the SQLite engine's pre-update, commit and rollback hooks; another
// engine reports the same events its own way).
type ConnConfig struct {
	Path            string // the SQLite file, or the PostgreSQL URL
	StoreID         int64  // what the store's id function answers: which store a transaction is on
	SyncFull        bool
	BusyTimeoutMS   int64
	MaxMessageBytes int64
	// AttemptHistory is how many failed deliveries each message keeps in
	// its history (Row.Attempts), the last ones; 0 or less keeps none.
	AttemptHistory int
	Now            func() int64 // epoch milliseconds from the store's clock
	// Claimable is called, on the connection's goroutine, for each row of
	// messages that an insert or update leaves active and not held; Due for
	// each row it leaves scheduled or locked (and not held), with the moment
	// the row becomes claimable without another write (its visible_at or
	// locked_until); Commit and Rollback at the end of each transaction,
	// with the key of its connection (TxKey): they apply or drop what
	// Settling, Changed, Created and Dropped reported under that key, and
	// nothing of another. Any may be nil.
	Claimable func(queue string)
	Due       func(queue string, at int64)
	Commit    func(key TxKey)
	Rollback  func(key TxKey)
	// Settling is called, on the connection's goroutine, when a settlement
	// runs inside a caller's bare transaction (SettleTx), before its
	// statement: op and the delivery it names (queue, seq, token). Like
	// Claimable it reports a write not yet committed: Commit and Rollback
	// tell whether it stands. May be nil.
	Settling func(key TxKey, op Op, queue string, seq int64, token string)
	// Changed is called, on the connection's goroutine, for each row of
	// messages inserted, deleted, or updated to another state: the raw
	// material of the store's per-queue counts (see RowChange). Created and
	// Dropped are called for each row of queues inserted or deleted, with
	// the queue's name. Like Claimable they report writes not yet
	// committed: the Commit or Rollback of the same key tells which
	// survive. Any may be nil.
	Changed          func(key TxKey, c RowChange)
	Created, Dropped func(key TxKey, queue string)
	// Closing reports that the store is closing: from then on every
	// commit on the connection is refused (it rolls back, and the commit
	// fails with errs.ErrClosed) and the SQL functions fail with
	// errs.ErrClosed, so nothing commits once Close has begun. Required.
	Closing func() bool
	// Bounds, when not nil, is kept a lower bound of every queue's due
	// moments (DueBounds): the pre-update hook lowers it, a rollback
	// empties it. Pass the same value in every ClaimRequest.
	Bounds *DueBounds
	// Woken is called, on a goroutine of the engine's, when another
	// connection (another process) committed a message of queue claimable
	// or scheduled; queue "" when the engine cannot tell which queues (its
	// notifications were lost). Engines whose store is the only writer
	// never call it. May be nil.
	Woken func(queue string)
	// MaxConns bounds the connections of an engine that keeps a pool (the
	// PostgreSQL engine); 0 is the engine's default.
	MaxConns int
	// Opened and Closed are called when the connection is opened and after
	// it is closed (database/sql closes a connection in use only once its
	// transaction has ended). Either may be nil.
	Opened, Closed func()
}

// RowChange is one row of messages changing state, as the pre-update hook
// sees it: Old is "" for an insert, New is "" for a delete, and an update
// that leaves the state alone (a renewal, a group release) is not reported.
// Bytes is the body length of an inserted or deleted row (0 for an update,
// which never changes a body): what keeps a queue's bytes without reading
// a table. Op is what made the change when the engine's statement knows it
// (a settlement's Op, or OpClaim), "" when it does not (the SQLite
// engine's hook): the store then names it by what the transaction tagged,
// which on a pool cannot tell one transaction's tag from another's.
type RowChange struct {
	Queue    string
	Old, New string
	Bytes    int64
	Op       Op
	// Redelivered is set by a claim that handed the row out again (its
	// delivery count now above 1), for an engine whose statements know it
	// (PostgreSQL); SQLite's hook does not read the count, and the store
	// counts its redeliveries from the rows the claim returns.
	Redelivered bool
}

// OpClaim is no settlement: it names a claim in RowChange.Op.
const OpClaim Op = "claim"

// DueBounds remembers, per queue, a moment before which no scheduled
// message of the queue falls due and no lease of it lapses, so that a
// claim skips the due probe (two index seeks and a statement) when nothing
// can be due. A queue without an entry is unknown: the claim probes, and
// the probe sets the entry. The connection's pre-update hook lowers an
// entry for every row an insert or update leaves scheduled or locked (held
// or not), so an entry stays a lower bound of the queue's due moments
// whatever the statements do; a rollback forgets every entry, because the
// rows it brings back were never seen by the hook. The store is the only
// writer of its file, so nothing changes rows behind the hook.
type DueBounds struct {
	mu sync.Mutex
	m  map[string]int64
}

// NewDueBounds returns bounds that know nothing yet.
func NewDueBounds() *DueBounds { return &DueBounds{m: map[string]int64{}} }

// Quiet reports whether nothing of queue can be due at now.
func (b *DueBounds) Quiet(queue string, now int64) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	at, ok := b.m[queue]
	b.mu.Unlock()
	return ok && now < at
}

// Set records that nothing of queue is due before at.
func (b *DueBounds) Set(queue string, at int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.m[queue] = at
	b.mu.Unlock()
}

// Lower records a row of queue that falls due at at.
func (b *DueBounds) Lower(queue string, at int64) {
	b.mu.Lock()
	if cur, ok := b.m[queue]; ok && at < cur {
		b.m[queue] = at
	}
	b.mu.Unlock()
}

// Forget drops every entry.
func (b *DueBounds) Forget() {
	b.mu.Lock()
	clear(b.m)
	b.mu.Unlock()
}
