// Package driver is the seam between mqlite and a storage engine: the
// engine-neutral types every statement speaks (messages, queues, topics,
// schedules, leases, settlements, receipts) and the two interfaces an
// engine implements, Driver (the file: open, ready, recover, back up) and
// Executor (one method per operation on a DBTX). River's riverdriver is the
// model. The package imports no engine and not package mqlite: the SQLite
// engine (internal/engine) implements it, and a second engine implements the
// same interfaces. An engine's own mechanisms (hooks, group commit, the
// statement cache) stay its business and surface through ConnConfig's
// callbacks.
package driver

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// DBTX is what an engine needs from a *sql.DB, *sql.Tx or *sql.Conn.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Driver is a storage engine: its handle on a file and what the store
// needs of it beyond the statements of Executor. docs/internals.md lists
// the contract an engine signs; the conformance kit judges it.
type Driver interface {
	Executor
	// Open returns the engine's handle on the file cfg.Path, serialized on
	// one connection, with cfg's callbacks wired. It does not read or write
	// the file's contents. release drops the handle's hold on cfg's
	// functions once the connection has closed.
	Open(cfg ConnConfig) (db *sql.DB, release func(), err error)
	// Prepare readies a file the schema check accepted, before the
	// migrations: its journal and page settings. fresh is a file with no
	// mqlite schema yet.
	Prepare(ctx context.Context, db *sql.DB, fresh bool) error
	// Recover releases every lease an earlier process left in the file and
	// returns how many.
	Recover(ctx context.Context, db DBTX, now int64) (int64, error)
	// Backup writes a consistent copy of the file to the new file path.
	Backup(ctx context.Context, db DBTX, path string) error
	// CheckpointEvery returns a sweep's stop function: it reports stop()
	// and, every n calls, first waits for the engine's log to be folded
	// back into the file, so a long sweep never grows the log without
	// bound.
	CheckpointEvery(ctx context.Context, db *sql.DB, n int, stop func() bool) func() bool
	// Owns reports whether db, the handle a caller's transaction runs on,
	// is a handle of this engine's database (Of asks it).
	Owns(db *sql.DB) bool
	// Shared reports whether other processes write the same database, so
	// that what the store's callbacks report is not all that changes: the
	// store then reads its counts from the database.
	Shared() bool
}

// Executor runs mqlite's operations on a DBTX: a handle, or a transaction
// (the store's or a caller's bare one on the store's handle). Times are
// epoch milliseconds from the store's clock; no method reads the wall
// clock. Each method is one operation on queues, messages, leases,
// receipts or settlements; none takes SQL text.
type Executor interface {
	// Queues.

	// CreateQueue inserts q; a name in use is errs.ErrQueueExists.
	CreateQueue(ctx context.Context, db DBTX, q Queue, now int64) error
	// UpdateQueue rewrites the settings of the existing queue q.Name.
	UpdateQueue(ctx context.Context, db DBTX, q Queue, now int64) error
	// SetPaused pauses the queue name at at, or resumes it (at 0).
	SetPaused(ctx context.Context, db DBTX, name string, at int64) error
	// DeleteQueue drops the queue name with its messages, dedup entries,
	// receipts and receive attempts, and its subscription if it has one.
	DeleteQueue(ctx context.Context, db DBTX, name string) error
	// GetQueue reads the queue name; errs.ErrQueueNotFound when none.
	GetQueue(ctx context.Context, db DBTX, name string) (Queue, error)
	// ListQueues reads every queue.
	ListQueues(ctx context.Context, db DBTX) ([]Queue, error)

	// Topics and subscriptions.

	// CreateTopic inserts the topic name.
	CreateTopic(ctx context.Context, db DBTX, name string, now int64) error
	// DeleteTopic drops the topic name and its subscriptions.
	DeleteTopic(ctx context.Context, db DBTX, name string) error
	// GetTopic reads the topic name with its subscriptions.
	GetTopic(ctx context.Context, db DBTX, name string) (Topic, error)
	// ListTopics reads every topic with its subscriptions.
	ListTopics(ctx context.Context, db DBTX) ([]Topic, error)
	// CreateSubscription creates the queue q and subscribes it to topic
	// through f.
	CreateSubscription(ctx context.Context, db DBTX, topic string, q Queue, f Filter, now int64) error
	// UpdateSubscription replaces the filter of topic's subscription queue.
	UpdateSubscription(ctx context.Context, db DBTX, topic, queue string, f Filter) error
	// DeleteSubscription drops topic's subscription queue.
	DeleteSubscription(ctx context.Context, db DBTX, topic, queue string) error

	// Messages: send, claim, read.

	// Enqueue is the send: msgs into the queue or topic name inside tx,
	// which may be a caller's bare transaction on the store's handle.
	Enqueue(ctx context.Context, tx DBTX, name string, msgs []SendMessage) ([]SendResult, error)
	// Claim runs one Receive inside tx: leases up to r.Max messages.
	Claim(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error)
	// MakeClaimable promotes q's due scheduled messages and reaps its
	// lapsed leases; it writes nothing when nothing is due.
	MakeClaimable(ctx context.Context, tx DBTX, q Queue, now int64) error
	// NextDue returns the earliest moment a message of queue becomes
	// claimable without another write; 0 when none.
	NextDue(ctx context.Context, db DBTX, queue string) (int64, error)
	// ClaimDeferred leases the deferred message seq of q; ErrSpentDeferred
	// when it had no delivery left and was dead-lettered instead.
	ClaimDeferred(ctx context.Context, tx DBTX, q Queue, seq, now int64) (Row, error)
	// Peek reads a page of a queue's messages without leasing them.
	Peek(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error)
	// Find reads a page of a queue's messages that match r's filters.
	Find(ctx context.Context, db DBTX, r FindRequest) (FindResult, error)
	// Stats reads a queue's count, bytes and oldest message per state.
	Stats(ctx context.Context, db DBTX, queue string) (map[string]StateStats, error)
	// Oldest reads the enqueue moment of queue's claimable message of lowest
	// sequence number and the dead-letter moment of its dead letter of
	// lowest sequence number (0 for none).
	Oldest(ctx context.Context, db DBTX, queue string) (activeEnq, deadAt int64, err error)

	// Leases and settlements.

	// Settle applies one fenced settlement inside tx, with its receipt; a
	// retry of the same settlement replays from the receipt.
	Settle(ctx context.Context, tx DBTX, s Settlement) error
	// SettleTx is the in-transaction settlement: s inside tx, which may be
	// a caller's bare transaction on the store's handle, at the store's
	// now (s.Now is ignored), told to the store (ConnConfig.Settling) so
	// that what follows a settlement happens when tx commits. It never
	// replays: a delivery already settled is errs.ErrAlreadySettled or
	// errs.ErrLockLost, and the caller rolls tx back. A transaction on any
	// other handle is errs.ErrNotAStore, with nothing written.
	SettleTx(ctx context.Context, tx DBTX, s Settlement) error
	// CompleteMany completes every lease of locks inside tx, each with its
	// own error (nil when it completed or replayed).
	CompleteMany(ctx context.Context, tx DBTX, locks []Settlement, now int64) ([]error, error)
	// Renew extends a live lease and returns its new expiry.
	Renew(ctx context.Context, tx DBTX, r RenewRequest) (int64, error)

	// Dead letters and operator moves.

	// PeekDeadLetters reads a page of a queue's dead letters.
	PeekDeadLetters(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error)
	// Redrive brings the dead letters seqs of queue (all of them when seqs
	// is empty) back to active and returns how many came back.
	Redrive(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error)
	// DeliverNow makes the scheduled messages seqs of queue (all of them
	// when seqs is empty) due at now and returns how many it changed.
	DeliverNow(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error)
	// PurgeBatch deletes up to SweepBatch messages of queue in state and
	// returns how many; the caller repeats it until it deletes fewer.
	PurgeBatch(ctx context.Context, db DBTX, queue, state string) (int64, error)
	// PurgeSeqs deletes the messages seqs of queue in state.
	PurgeSeqs(ctx context.Context, db DBTX, queue, state string, seqs []int64) (int64, error)
	// Retain applies q's dead-letter retention at now.
	Retain(ctx context.Context, db DBTX, q Queue, now int64, stop func() bool) (int64, error)

	// Sweeps.

	// Reap releases every lease lapsed by now: back to active, or to the
	// dead letters after the last allowed delivery. stop (may be nil) is
	// asked between batches whether to give up early; so for every sweep.
	Reap(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error)
	// Promote makes every scheduled message due by now active.
	Promote(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error)
	// Expire removes every message nobody holds whose time to live passed,
	// or dead-letters it (ReasonTTL) on the queues that ask for it.
	Expire(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error)
	// Janitor deletes expired settlement receipts, receive attempts and
	// dedup entries.
	Janitor(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error)
	// CompactReceipts turns one batch (ReceiptBatch) of completed
	// messages into receipts inside tx and returns how many.
	CompactReceipts(ctx context.Context, tx DBTX, now int64) (int64, error)

	// Schedules.

	// CreateSchedule inserts r.
	CreateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error
	// UpdateSchedule rewrites the existing schedule r.Name.
	UpdateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error
	// DeleteSchedule drops the schedule name.
	DeleteSchedule(ctx context.Context, db DBTX, name string) error
	// GetSchedule reads the schedule name.
	GetSchedule(ctx context.Context, db DBTX, name string) (Schedule, error)
	// ListSchedules reads up to limit schedules named after after, in name
	// order, stopping before their sizes pass maxBytes (when positive).
	ListSchedules(ctx context.Context, db DBTX, after string, limit int, maxBytes int64) ([]Schedule, error)
	// DueSchedules reads up to limit schedules whose next period has begun
	// by now, earliest first.
	DueSchedules(ctx context.Context, db DBTX, now int64, limit int) ([]Schedule, error)
	// AdvanceSchedule records a firing of the schedule name, in the
	// transaction that enqueued its messages.
	AdvanceSchedule(ctx context.Context, db DBTX, name string, a Advance) error
	// NextScheduleAt returns the earliest next period of any schedule; 0
	// when there is none.
	NextScheduleAt(ctx context.Context, db DBTX) (int64, error)

	// Commit records (the broker's idempotent commits).

	// LookupCommit returns the live record of key in scope; found is false
	// when there is none.
	LookupCommit(ctx context.Context, tx DBTX, scope, key string) (rec CommitRecord, found bool, err error)
	// RecordCommit keeps rec under key in scope, in the commit's
	// transaction.
	RecordCommit(ctx context.Context, tx DBTX, scope, key string, rec CommitRecord) error
	// TrimCommits keeps the keep newest records of scope and returns how
	// many it holds after.
	TrimCommits(ctx context.Context, tx DBTX, scope string, keep int) (int, error)

	// Access keys (the broker's).

	// CreateKey inserts the key k.
	CreateKey(ctx context.Context, db DBTX, k AccessKey) error
	// ListKeys reads every key, revoked ones included, oldest first.
	ListKeys(ctx context.Context, db DBTX) ([]AccessKey, error)
	// RevokeKey revokes the key id at now, unless it is revoked already;
	// found is false when there is no such key.
	RevokeKey(ctx context.Context, db DBTX, id string, now int64) (found bool, err error)
	// GetKey reads the key id; found is false when there is none.
	GetKey(ctx context.Context, db DBTX, id string) (k AccessKey, found bool, err error)

	// Dedup entries and the store's clock (the jobs' uniqueness).

	// LookupDedup reads the live dedup entry of messageID in queue.
	LookupDedup(ctx context.Context, db DBTX, queue, messageID string) (DedupEntry, error)
	// ForgetDedup drops the dedup entry of messageID in queue that points
	// at the message seq.
	ForgetDedup(ctx context.Context, db DBTX, queue, messageID string, seq int64) error
	// Now reads the store's now through db.
	Now(ctx context.Context, db DBTX) (int64, error)
	// StoreID returns the id of the store whose handle db is on; an error
	// when db is on no store's handle (the re-entry check of InTx asks it).
	StoreID(ctx context.Context, db DBTX) (int64, error)
	// MaxMessageBytes returns the largest message the store of db takes
	// (its Config.MaxMessageBytes).
	MaxMessageBytes(ctx context.Context, db DBTX) (int64, error)
	// Busy counts, in one snapshot, the messages of queues a consumer could
	// take or holds now: active and not held by their group, locked, or
	// scheduled and due.
	Busy(ctx context.Context, db DBTX, queues []string) (int64, error)
}

// The registry: package mqlite registers its engine at init, and the
// packages that act on a caller's transaction (outbox, consumer, broker,
// jobs, mqlitetest) ask it for the Executor that owns the transaction.
var (
	mu      sync.Mutex               // serializes Register
	drivers atomic.Pointer[[]Driver] // read without a lock on every send
)

// Register adds d to the engines a transaction can belong to. Package
// mqlite calls it at init with the SQLite engine.
func Register(d Driver) {
	mu.Lock()
	defer mu.Unlock()
	var next []Driver
	if cur := drivers.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, d)
	drivers.Store(&next)
}

// Of returns the Executor that owns tx, a transaction (or handle) of a
// store. With one engine registered it is that engine: a transaction on
// any other handle is then refused by the engine's own statements
// (errs.ErrNotAStore). When a second engine registers (PostgreSQL), Of
// tells them apart by the handle tx runs on (HandleOf, Driver.Owns). It panics when no engine is registered, which
// cannot happen in a program that opened a store (package mqlite registers
// at init).
func Of(tx DBTX) Executor {
	cur := drivers.Load()
	if cur == nil {
		panic("driver: no engine registered (package mqlite registers one at init)")
	}
	list := *cur
	if len(list) > 1 {
		if h := HandleOf(tx); h != nil {
			for _, d := range list {
				if d.Owns(h) {
					return d
				}
			}
		}
	}
	return list[0]
}
