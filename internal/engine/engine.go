package engine

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"modernc.org/sqlite"
)

// The engine-neutral types live in internal/driver, the seam every caller
// goes through; these aliases keep the engine's own code in its words.
type (
	// DBTX is driver.DBTX.
	DBTX = driver.DBTX
	// AccessKey is driver.AccessKey.
	AccessKey = driver.AccessKey
	// ConnConfig is driver.ConnConfig.
	ConnConfig = driver.ConnConfig
	// RowChange is driver.RowChange.
	RowChange = driver.RowChange
	// DueBounds is driver.DueBounds.
	DueBounds = driver.DueBounds
	// Row is driver.Row.
	Row = driver.Row
	// ClaimRequest is driver.ClaimRequest.
	ClaimRequest = driver.ClaimRequest
	// PeekRequest is driver.PeekRequest.
	PeekRequest = driver.PeekRequest
	// FindRequest is driver.FindRequest.
	FindRequest = driver.FindRequest
	// FindResult is driver.FindResult.
	FindResult = driver.FindResult
	// StateStats is driver.StateStats.
	StateStats = driver.StateStats
	// DedupEntry is driver.DedupEntry.
	DedupEntry = driver.DedupEntry
	// Queue is driver.Queue.
	Queue = driver.Queue
	// Topic is driver.Topic.
	Topic = driver.Topic
	// Subscription is driver.Subscription.
	Subscription = driver.Subscription
	// Filter is driver.Filter.
	Filter = driver.Filter
	// Match is driver.Match.
	Match = driver.Match
	// Schedule is driver.Schedule.
	Schedule = driver.Schedule
	// Advance is driver.Advance.
	Advance = driver.Advance
	// SendMessage is driver.SendMessage.
	SendMessage = driver.SendMessage
	// SendResult is driver.SendResult.
	SendResult = driver.SendResult
	// Copy is driver.Copy.
	Copy = driver.Copy
	// Fields is driver.Fields.
	Fields = driver.Fields
	// Op is driver.Op.
	Op = driver.Op
	// Settlement is driver.Settlement.
	Settlement = driver.Settlement
	// RenewRequest is driver.RenewRequest.
	RenewRequest = driver.RenewRequest
)

// The settlement operations (driver's).
const (
	OpComplete = driver.OpComplete
	OpAbandon  = driver.OpAbandon
	OpReject   = driver.OpReject
	OpDefer    = driver.OpDefer
	OpRelease  = driver.OpRelease
)

// The limits, reasons and batch sizes (driver's).
const (
	MaxMessageIDLen      = driver.MaxMessageIDLen
	MaxGroupIDLen        = driver.MaxGroupIDLen
	MaxSubjectLen        = driver.MaxSubjectLen
	MaxPropertiesBytes   = driver.MaxPropertiesBytes
	MaxTTL               = driver.MaxTTL
	MaxDelay             = driver.MaxDelay
	ReceiptTTLMS         = driver.ReceiptTTLMS
	ReasonMaxDelivery    = driver.ReasonMaxDelivery
	ReasonTTL            = driver.ReasonTTL
	SweepBatch           = driver.SweepBatch
	SweepCheckpointEvery = driver.SweepCheckpointEvery
	ReceiptBatch         = driver.ReceiptBatch
)

// ErrSpentDeferred is driver.ErrSpentDeferred.
var ErrSpentDeferred = driver.ErrSpentDeferred

// NewDueBounds returns bounds that know nothing yet (driver.NewDueBounds).
func NewDueBounds() *DueBounds { return driver.NewDueBounds() }

// SQLite is the engine on a local SQLite file, through modernc.org/sqlite:
// driver.Driver, a method per package function. Everything SQLite-only
// (the connection's SQL functions and hooks, PRAGMAs, result codes, VACUUM
// INTO) stays behind it; the statements are in the dialect SQLite and
// libSQL share.
type SQLite struct{}

var _ driver.Driver = SQLite{}

// Open opens the file on a private driver instance; see openDB.
func (SQLite) Open(cfg ConnConfig) (*sql.DB, func(), error) { return openDB(cfg) }

// Prepare gives a new file the engine's page size and puts the file in WAL
// mode, which mqlite needs: readers never block the writer and a crash
// never leaves a torn state.
func (SQLite) Prepare(ctx context.Context, db *sql.DB, fresh bool) error {
	if fresh {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", PageSize)); err != nil {
			return fmt.Errorf("page size: %w", err)
		}
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return fmt.Errorf("journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode: file stays in %q mode, mqlite needs wal", mode)
	}
	return nil
}

// Owns reports whether db is a SQLite handle.
func (SQLite) Owns(db *sql.DB) bool {
	_, ok := db.Driver().(*sqlite.Driver)
	return ok
}

// Shared is false: the store is the only writer of its file.
func (SQLite) Shared() bool { return false }

// Recover recovers; see the package function Recover.
func (SQLite) Recover(ctx context.Context, db DBTX, now int64) (int64, error) {
	return Recover(ctx, db, now)
}

// Backup runs VACUUM INTO path: a consistent, compacted copy of the last
// commit, taken while the store stays in use.
func (SQLite) Backup(ctx context.Context, db DBTX, path string) error {
	_, err := db.ExecContext(ctx, `VACUUM INTO ?`, path)
	return err
}

// CheckpointEvery waits for the checkpointer; see the package function.
func (SQLite) CheckpointEvery(ctx context.Context, db *sql.DB, n int, stop func() bool) func() bool {
	return CheckpointEvery(ctx, db, n, stop)
}

// CreateQueue: see the package function.
func (SQLite) CreateQueue(ctx context.Context, db DBTX, q Queue, now int64) error {
	return CreateQueue(ctx, db, q, now)
}

// UpdateQueue: see the package function.
func (SQLite) UpdateQueue(ctx context.Context, db DBTX, q Queue, now int64) error {
	return UpdateQueue(ctx, db, q, now)
}

// SetPaused: see the package function.
func (SQLite) SetPaused(ctx context.Context, db DBTX, name string, at int64) error {
	return SetPaused(ctx, db, name, at)
}

// DeleteQueue: see the package function.
func (SQLite) DeleteQueue(ctx context.Context, db DBTX, name string) error {
	return DeleteQueue(ctx, db, name)
}

// GetQueue: see the package function.
func (SQLite) GetQueue(ctx context.Context, db DBTX, name string) (Queue, error) {
	return GetQueue(ctx, db, name)
}

// ListQueues: see the package function.
func (SQLite) ListQueues(ctx context.Context, db DBTX) ([]Queue, error) { return ListQueues(ctx, db) }

// CreateTopic: see the package function.
func (SQLite) CreateTopic(ctx context.Context, db DBTX, name string, now int64) error {
	return CreateTopic(ctx, db, name, now)
}

// DeleteTopic: see the package function.
func (SQLite) DeleteTopic(ctx context.Context, db DBTX, name string) error {
	return DeleteTopic(ctx, db, name)
}

// GetTopic: see the package function.
func (SQLite) GetTopic(ctx context.Context, db DBTX, name string) (Topic, error) {
	return GetTopic(ctx, db, name)
}

// ListTopics: see the package function.
func (SQLite) ListTopics(ctx context.Context, db DBTX) ([]Topic, error) { return ListTopics(ctx, db) }

// CreateSubscription: see the package function.
func (SQLite) CreateSubscription(ctx context.Context, db DBTX, topic string, q Queue, f Filter, now int64) error {
	return CreateSubscription(ctx, db, topic, q, f, now)
}

// UpdateSubscription: see the package function.
func (SQLite) UpdateSubscription(ctx context.Context, db DBTX, topic, queue string, f Filter) error {
	return UpdateSubscription(ctx, db, topic, queue, f)
}

// DeleteSubscription: see the package function.
func (SQLite) DeleteSubscription(ctx context.Context, db DBTX, topic, queue string) error {
	return DeleteSubscription(ctx, db, topic, queue)
}

// Enqueue sends; see Send.
func (SQLite) Enqueue(ctx context.Context, tx DBTX, name string, msgs []SendMessage) ([]SendResult, error) {
	return Send(ctx, tx, name, msgs)
}

// Claim claims; see the package function Claim.
func (SQLite) Claim(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error) {
	return Claim(ctx, tx, r)
}

// MakeClaimable: see the package function.
func (SQLite) MakeClaimable(ctx context.Context, tx DBTX, q Queue, now int64) error {
	return MakeClaimable(ctx, tx, q, now)
}

// NextDue: see the package function.
func (SQLite) NextDue(ctx context.Context, db DBTX, queue string) (int64, error) {
	return NextDue(ctx, db, queue)
}

// ClaimDeferred: see the package function.
func (SQLite) ClaimDeferred(ctx context.Context, tx DBTX, q Queue, seq, now int64) (Row, error) {
	return ClaimDeferred(ctx, tx, q, seq, now)
}

// Peek: see the package function.
func (SQLite) Peek(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error) {
	return Peek(ctx, db, r)
}

// Find: see the package function.
func (SQLite) Find(ctx context.Context, db DBTX, r FindRequest) (FindResult, error) {
	return Find(ctx, db, r)
}

// Stats: see the package function.
func (SQLite) Stats(ctx context.Context, db DBTX, queue string) (map[string]StateStats, error) {
	return Stats(ctx, db, queue)
}

// Oldest: see the package function.
func (SQLite) Oldest(ctx context.Context, db DBTX, queue string) (int64, int64, error) {
	return Oldest(ctx, db, queue)
}

// Settle settles; see the package function Settle.
func (SQLite) Settle(ctx context.Context, tx DBTX, s Settlement) error { return Settle(ctx, tx, s) }

// SettleTx reads now from the store's clock and reports the settlement to
// the store through the handle's SQL function mqlite_settling, which no
// other handle has (errs.ErrNotAStore, as for a send), then settles; a
// fence that matches no row is alreadySettled, never a replay.
func (SQLite) SettleTx(ctx context.Context, tx DBTX, s Settlement) error {
	if s.Op == OpComplete {
		return CompleteTx(ctx, tx, s) // the same in one statement
	}
	if err := tx.QueryRowContext(ctx, `SELECT mqlite_settling(?, ?, ?, ?)`, string(s.Op), s.Queue, s.Seq, s.Token).Scan(&s.Now); err != nil {
		return interpret(string(s.Op), err)
	}
	return settle(ctx, tx, s, alreadySettled)
}

// CompleteMany: see the package function.
func (SQLite) CompleteMany(ctx context.Context, tx DBTX, locks []Settlement, now int64) ([]error, error) {
	return CompleteMany(ctx, tx, locks, now)
}

// Renew: see the package function.
func (SQLite) Renew(ctx context.Context, tx DBTX, r RenewRequest) (int64, error) {
	return Renew(ctx, tx, r)
}

// PeekDeadLetters: see the package function.
func (SQLite) PeekDeadLetters(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error) {
	return PeekDeadLetters(ctx, db, r)
}

// Redrive: see the package function.
func (SQLite) Redrive(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error) {
	return Redrive(ctx, db, queue, seqs, now)
}

// DeliverNow: see the package function.
func (SQLite) DeliverNow(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error) {
	return DeliverNow(ctx, db, queue, seqs, now)
}

// PurgeBatch: see the package function.
func (SQLite) PurgeBatch(ctx context.Context, db DBTX, queue, state string) (int64, error) {
	return PurgeBatch(ctx, db, queue, state)
}

// PurgeSeqs: see the package function.
func (SQLite) PurgeSeqs(ctx context.Context, db DBTX, queue, state string, seqs []int64) (int64, error) {
	return PurgeSeqs(ctx, db, queue, state, seqs)
}

// Retain: see the package function.
func (SQLite) Retain(ctx context.Context, db DBTX, q Queue, now int64, stop func() bool) (int64, error) {
	return Retain(ctx, db, q, now, stop)
}

// Reap: see the package function.
func (SQLite) Reap(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	return Reap(ctx, db, now, stop)
}

// Promote: see the package function.
func (SQLite) Promote(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	return Promote(ctx, db, now, stop)
}

// Expire: see the package function.
func (SQLite) Expire(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	return Expire(ctx, db, now, stop)
}

// Janitor: see the package function.
func (SQLite) Janitor(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	return Janitor(ctx, db, now, stop)
}

// CompactReceipts: see the package function.
func (SQLite) CompactReceipts(ctx context.Context, tx DBTX, now int64) (int64, error) {
	return CompactReceipts(ctx, tx, now)
}

// CreateSchedule: see the package function.
func (SQLite) CreateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error {
	return CreateSchedule(ctx, db, r, now)
}

// UpdateSchedule: see the package function.
func (SQLite) UpdateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error {
	return UpdateSchedule(ctx, db, r, now)
}

// DeleteSchedule: see the package function.
func (SQLite) DeleteSchedule(ctx context.Context, db DBTX, name string) error {
	return DeleteSchedule(ctx, db, name)
}

// GetSchedule: see the package function.
func (SQLite) GetSchedule(ctx context.Context, db DBTX, name string) (Schedule, error) {
	return GetSchedule(ctx, db, name)
}

// ListSchedules: see the package function.
func (SQLite) ListSchedules(ctx context.Context, db DBTX, after string, limit int, maxBytes int64) ([]Schedule, error) {
	return ListSchedules(ctx, db, after, limit, maxBytes)
}

// DueSchedules: see the package function.
func (SQLite) DueSchedules(ctx context.Context, db DBTX, now int64, limit int) ([]Schedule, error) {
	return DueSchedules(ctx, db, now, limit)
}

// AdvanceSchedule: see the package function.
func (SQLite) AdvanceSchedule(ctx context.Context, db DBTX, name string, a Advance) error {
	return AdvanceSchedule(ctx, db, name, a)
}

// NextScheduleAt: see the package function.
func (SQLite) NextScheduleAt(ctx context.Context, db DBTX) (int64, error) {
	return NextScheduleAt(ctx, db)
}

// LookupCommit: see the package function.
func (SQLite) LookupCommit(ctx context.Context, tx DBTX, scope, key string) (driver.CommitRecord, bool, error) {
	return LookupCommit(ctx, tx, scope, key)
}

// RecordCommit: see the package function.
func (SQLite) RecordCommit(ctx context.Context, tx DBTX, scope, key string, rec driver.CommitRecord) error {
	return RecordCommit(ctx, tx, scope, key, rec)
}

// TrimCommits: see the package function.
func (SQLite) TrimCommits(ctx context.Context, tx DBTX, scope string, keep int) (int, error) {
	return TrimCommits(ctx, tx, scope, keep)
}

// LookupDedup: see the package function.
func (SQLite) LookupDedup(ctx context.Context, db DBTX, queue, messageID string) (DedupEntry, error) {
	return LookupDedup(ctx, db, queue, messageID)
}

// ForgetDedup: see the package function.
func (SQLite) ForgetDedup(ctx context.Context, db DBTX, queue, messageID string, seq int64) error {
	return ForgetDedup(ctx, db, queue, messageID, seq)
}

// Now: see the package function.
func (SQLite) Now(ctx context.Context, db DBTX) (int64, error) { return Now(ctx, db) }

// StoreID reads the handle's SQL function mqlite_store_id(), which only a
// store's handle has.
func (SQLite) StoreID(ctx context.Context, db DBTX) (int64, error) {
	var id int64
	err := db.QueryRowContext(ctx, `SELECT mqlite_store_id()`).Scan(&id)
	return id, err
}

// MaxMessageBytes reads the handle's SQL function mqlite_max_message_bytes().
func (SQLite) MaxMessageBytes(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT mqlite_max_message_bytes()`).Scan(&n)
	return n, err
}

// Busy: see the package function.
func (SQLite) Busy(ctx context.Context, db DBTX, queues []string) (int64, error) {
	return Busy(ctx, db, queues)
}
