package mqlite

import "github.com/mqlite/mqlite/internal/errs"

// Errors returned by mqlite. Match them with errors.Is; the returned errors
// wrap these with detail.
var (
	// ErrDBLocked is returned by Open when another store, in this process or
	// another, holds the file. One file has one writer: run the broker to
	// share it between processes.
	ErrDBLocked = sentinel("mqlite: database is locked by another store")
	// ErrSchemaVersionMismatch is returned by Open for a file written by an
	// incompatible mqlite (a newer one, say), or for a SQLite file that is
	// not an mqlite store but holds an object whose name begins with
	// "mqlite_", a name mqlite reserves. The file is left untouched.
	ErrSchemaVersionMismatch = sentinel("mqlite: schema version mismatch")
	// ErrNoStore is returned by Open with Config.ExistingOnly when the path
	// holds no mqlite store: no file at all, or a SQLite file without
	// mqlite's schema. Nothing is created or written.
	ErrNoStore = sentinel("mqlite: no store")
	// ErrMigrationNeeded is returned by Open with Config.ExistingOnly when
	// the store's layout is older than this binary's: migrate it (Migrate,
	// `mqlite migrate`, or Open without ExistingOnly). Nothing is written.
	ErrMigrationNeeded = sentinel("mqlite: the store needs a migration")
	// ErrMigration is returned by Open and Migrate when a migration failed.
	// It rolled back whole: the file keeps its earlier layout. The error
	// says which step failed and why.
	ErrMigration = sentinel("mqlite: migration failed")
	// ErrClosed is returned by calls on a closed Store, and by a
	// transaction that tried to commit after Close began (it rolled back).
	ErrClosed = sentinel("mqlite: store is closed")
	// ErrInvalidArgument matches every validation error; each also matches
	// the sentinel of its field, such as ErrInvalidLockDuration. errors.As
	// with an *InvalidArgumentError gives the details.
	ErrInvalidArgument = sentinel("mqlite: invalid argument")
	// ErrInvalidQueueName: a queue name is empty, too long or has a
	// character outside [A-Za-z0-9._:-].
	ErrInvalidQueueName = sentinel("mqlite: invalid queue name")
	// ErrInvalidMaxDelivery: QueueOptions.MaxDeliveryCount out of range.
	ErrInvalidMaxDelivery = sentinel("mqlite: invalid max delivery count")
	// ErrInvalidLockDuration: QueueOptions.LockDuration out of range.
	ErrInvalidLockDuration = sentinel("mqlite: invalid lock duration")
	// ErrInvalidDedupWindow: QueueOptions.DedupWindow out of range.
	ErrInvalidDedupWindow = sentinel("mqlite: invalid dedup window")
	// ErrInvalidTTL: a negative or out-of-range time to live.
	ErrInvalidTTL = sentinel("mqlite: invalid time to live")
	// ErrInvalidOrdering: an unknown Ordering, or a change of ordering on a
	// queue that holds messages.
	ErrInvalidOrdering = sentinel("mqlite: invalid ordering")
	// ErrInvalidRetention: a negative dead-letter retention bound.
	ErrInvalidRetention = sentinel("mqlite: invalid dead-letter retention")
	// ErrInvalidMessage: a message field is malformed: over its length
	// limit (see MaxMessageIDLen and the limits next to it), not valid
	// UTF-8, or a group id on a message that cannot carry one.
	ErrInvalidMessage = sentinel("mqlite: invalid message")
	// ErrNilTx is returned by the outbox when it is given no transaction.
	ErrNilTx = sentinel("mqlite: nil transaction")
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = sentinel("mqlite: queue not found")
	// ErrQueueExists: CreateQueue (or CreateSubscription) with a name
	// already in use by a queue or a topic.
	ErrQueueExists = sentinel("mqlite: queue already exists")
	// ErrMessageTooLarge: a message over Config.MaxMessageBytes (its body
	// and its metadata together).
	ErrMessageTooLarge = sentinel("mqlite: message too large")
	// ErrDuplicateConflict: a MessageID seen inside the dedup window with a
	// different body. The original message is unchanged.
	ErrDuplicateConflict = sentinel("mqlite: duplicate message id with a different body")
	// ErrNotAStore: the transaction given to the outbox is not on a
	// connection of an open mqlite Store.
	ErrNotAStore = sentinel("mqlite: transaction does not belong to an mqlite store")
	// ErrInsideTx: a Store call was made with the context of a Store.Tx
	// callback (tx.Context(), or a context derived from it) while that
	// transaction is open. The store has one connection and the
	// transaction holds it until it ends, so the call could never run: it
	// fails at once and changes nothing. Inside the transaction, write
	// with tx.SQL() (outbox.SendOne, the application's statements);
	// settle or receive after Tx returns (a Complete after the commit).
	ErrInsideTx = sentinel("mqlite: store call inside the transaction that holds the store's connection")
	// ErrLockLost: a settlement or renewal presented a token that is not
	// the current one, or a lease that has expired.
	ErrLockLost = sentinel("mqlite: lock lost")
	// ErrAlreadySettled: a settlement inside a transaction (CompleteTx,
	// RejectTx, a commit request, a Batch) found its delivery already
	// settled, by another transaction or an earlier run of this one. It
	// matches ErrLockLost too: the caller rolls its transaction back, so
	// its effects never commit twice. Only a plain Complete or Reject, or
	// the replay of a commit request under the same idempotency key,
	// answers an already settled delivery from its receipt.
	ErrAlreadySettled = sentinel("mqlite: lock lost: delivery already settled")
	// ErrMessageNotFound: no message with that sequence number in that
	// state.
	ErrMessageNotFound = sentinel("mqlite: message not found")
	// ErrDestinationExists: Backup was given a path that already exists;
	// a backup never overwrites a file.
	ErrDestinationExists = sentinel("mqlite: backup destination exists")
	// ErrAttemptConflict: a Receive reused an AttemptID (inside its replay
	// window, on the same queue) with other options. A replay must be the
	// same request; use a new AttemptID for a new one.
	ErrAttemptConflict = sentinel("mqlite: attempt id reused with other options")
	// ErrDiskFull: the disk (or the file system's quota) is full. The
	// statement changed nothing; the store stays usable once space is freed.
	ErrDiskFull = sentinel("mqlite: disk full")
	// ErrReadOnly: the file, its folder or its WAL cannot be written (a
	// read-only file or mount).
	ErrReadOnly = sentinel("mqlite: store file is read-only")
	// ErrInvalidTopicName: a topic name breaks the rules of queue names.
	ErrInvalidTopicName = sentinel("mqlite: invalid topic name")
	// ErrInvalidFilter: a subscription Filter is malformed (a Match with
	// neither In nor Prefix, too many conditions, ...).
	ErrInvalidFilter = sentinel("mqlite: invalid subscription filter")
	// ErrTopicNotFound: the named topic does not exist.
	ErrTopicNotFound = sentinel("mqlite: topic not found")
	// ErrTopicExists: CreateTopic with a name in use by a topic or a queue
	// (they share one namespace).
	ErrTopicExists = sentinel("mqlite: topic already exists")
	// ErrSubscriptionNotFound: no such subscription of that topic.
	ErrSubscriptionNotFound = sentinel("mqlite: subscription not found")
	// ErrInvalidSchedule: a schedule's name, Cron, TimeZone, Every or
	// CatchUp is malformed or out of range (see ScheduleOptions).
	ErrInvalidSchedule = sentinel("mqlite: invalid schedule")
	// ErrScheduleNotFound: the named schedule does not exist.
	ErrScheduleNotFound = sentinel("mqlite: schedule not found")
	// ErrScheduleExists: CreateSchedule with a name already in use by a
	// schedule.
	ErrScheduleExists = sentinel("mqlite: schedule already exists")
	// ErrUnsupported: an operation the store's engine does not offer (a
	// Backup of a PostgreSQL store, which the server's own tools take).
	ErrUnsupported = sentinel("mqlite: not supported by this engine")
	// ErrTargetNotEmpty: Copy was given a database that already holds
	// queues, messages, topics, schedules or access keys other than this
	// very copy (a retry of a copy that succeeded answers from it
	// instead). Nothing was written.
	ErrTargetNotEmpty = sentinel("mqlite: copy target is not empty")
)

// InvalidArgumentError is the error of one bad input value. errors.Is
// matches both its Kind and ErrInvalidArgument; errors.As gives the details.
type InvalidArgumentError struct {
	// Kind is the sentinel of the field, such as ErrInvalidLockDuration, or
	// ErrInvalidArgument for a value that has no sentinel of its own.
	Kind error
	// Detail says what was wrong, for people.
	Detail string
}

// Error returns the sentinel's text and the detail.
func (e *InvalidArgumentError) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap lets errors.Is see both Kind and ErrInvalidArgument.
func (e *InvalidArgumentError) Unwrap() []error {
	if e.Kind == ErrInvalidArgument {
		return []error{ErrInvalidArgument}
	}
	return []error{e.Kind, ErrInvalidArgument}
}

// invalidf returns an *InvalidArgumentError for kind, the detail formatted
// from format and args as by fmt.Sprintf.
func invalidf(kind error, format string, args ...any) error {
	return errs.Invalidf(kind, format, args...)
}

// sentinel returns the error of text. It is an errs.Sentinel, equal to the
// one of the same text that the engine and the schema return, so errors.Is
// matches theirs against the ErrXxx above.
func sentinel(text string) error { return errs.Sentinel(text) }

// The engine builds the InvalidArgumentError of a bad value through this.
func init() {
	errs.NewInvalid = func(kind error, detail string) error {
		return &InvalidArgumentError{Kind: kind, Detail: detail}
	}
}
