package mqlite

import (
	"errors"

	"github.com/mqlite/mqlite/internal/errs"
)

// Errors returned by mqlite. Match them with errors.Is; the returned errors
// wrap these with detail.
var (
	// ErrDBLocked is returned by Open when another store, in this process or
	// another, holds the file. One file has one writer: run the broker to
	// share it between processes.
	ErrDBLocked = errors.New("mqlite: database is locked by another store")
	// ErrSchemaVersionMismatch is returned by Open for a file written by an
	// incompatible mqlite (a newer one, say), or for a SQLite file that is
	// not an mqlite store but holds an object whose name begins with
	// "mqlite_", a name mqlite reserves. The file is left untouched.
	ErrSchemaVersionMismatch = errors.New("mqlite: schema version mismatch")
	// ErrNoStore is returned by Open with Options.ExistingOnly when the path
	// holds no mqlite store: no file at all, or a SQLite file without
	// mqlite's schema. Nothing is created or written.
	ErrNoStore = errors.New("mqlite: no store")
	// ErrMigrationNeeded is returned by Open with Options.ExistingOnly when
	// the store's layout is older than this binary's: migrate it (Migrate,
	// `mqlite migrate`, or Open without ExistingOnly). Nothing is written.
	ErrMigrationNeeded = errors.New("mqlite: the store needs a migration")
	// ErrMigration is returned by Open and Migrate when a migration failed.
	// It rolled back whole: the file keeps its earlier layout. The error
	// says which step failed and why.
	ErrMigration = errors.New("mqlite: migration failed")
	// ErrClosed is returned by calls on a closed Store, and by a
	// transaction that tried to commit after Close began (it rolled back).
	ErrClosed = errors.New("mqlite: store is closed")
	// ErrInvalidArgument matches every validation error; each also matches
	// the sentinel of its field, such as ErrInvalidLockDuration. errors.As
	// with an *InvalidArgumentError gives the details.
	ErrInvalidArgument = errors.New("mqlite: invalid argument")
	// ErrInvalidQueueName: a queue name is empty, too long or has a
	// character outside [A-Za-z0-9._:-].
	ErrInvalidQueueName = errors.New("mqlite: invalid queue name")
	// ErrInvalidMaxDelivery: QueueOptions.MaxDeliveryCount out of range.
	ErrInvalidMaxDelivery = errors.New("mqlite: invalid max delivery count")
	// ErrInvalidLockDuration: QueueOptions.LockDuration out of range.
	ErrInvalidLockDuration = errors.New("mqlite: invalid lock duration")
	// ErrInvalidDedupWindow: QueueOptions.DedupWindow out of range.
	ErrInvalidDedupWindow = errors.New("mqlite: invalid dedup window")
	// ErrInvalidTTL: a negative or out-of-range time to live.
	ErrInvalidTTL = errors.New("mqlite: invalid time to live")
	// ErrInvalidOrdering: an unknown Ordering, or a change of ordering on a
	// queue that holds messages.
	ErrInvalidOrdering = errors.New("mqlite: invalid ordering")
	// ErrInvalidRetention: a negative dead-letter retention bound.
	ErrInvalidRetention = errors.New("mqlite: invalid dead-letter retention")
	// ErrInvalidMessage: a message field is malformed: over its length
	// limit (see MaxMessageIDLen and the limits next to it), not valid
	// UTF-8, or a group id on a message that cannot carry one.
	ErrInvalidMessage = errors.New("mqlite: invalid message")
	// ErrNilTx is returned by the outbox when it is given no transaction.
	ErrNilTx = errors.New("mqlite: nil transaction")
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = errors.New("mqlite: queue not found")
	// ErrQueueExists: CreateQueue (or CreateSubscription) with a name
	// already in use by a queue or a topic.
	ErrQueueExists = errors.New("mqlite: queue already exists")
	// ErrMessageTooLarge: a message over Options.MaxMessageBytes (its body
	// and its metadata together).
	ErrMessageTooLarge = errors.New("mqlite: message too large")
	// ErrDuplicateConflict: a MessageID seen inside the dedup window with a
	// different body. The original message is unchanged.
	ErrDuplicateConflict = errors.New("mqlite: duplicate message id with a different body")
	// ErrNotAStore: the transaction given to the outbox is not on a
	// connection of an open mqlite Store.
	ErrNotAStore = errors.New("mqlite: transaction does not belong to an mqlite store")
	// ErrLockLost: a settlement or renewal presented a token that is not
	// the current one, or a lease that has expired.
	ErrLockLost = errors.New("mqlite: lock lost")
	// ErrMessageNotFound: no message with that sequence number in that
	// state.
	ErrMessageNotFound = errors.New("mqlite: message not found")
	// ErrDestinationExists: Backup was given a path that already exists;
	// a backup never overwrites a file.
	ErrDestinationExists = errors.New("mqlite: backup destination exists")
	// ErrAttemptConflict: a Receive reused an AttemptID (inside its replay
	// window, on the same queue) with other options. A replay must be the
	// same request; use a new AttemptID for a new one.
	ErrAttemptConflict = errors.New("mqlite: attempt id reused with other options")
	// ErrDiskFull: the disk (or the file system's quota) is full. The
	// statement changed nothing; the store stays usable once space is freed.
	ErrDiskFull = errors.New("mqlite: disk full")
	// ErrReadOnly: the file, its folder or its WAL cannot be written (a
	// read-only file or mount).
	ErrReadOnly = errors.New("mqlite: store file is read-only")
	// ErrInvalidTopicName: a topic name breaks the rules of queue names.
	ErrInvalidTopicName = errors.New("mqlite: invalid topic name")
	// ErrInvalidFilter: a subscription Filter is malformed (a Match with
	// neither In nor Prefix, too many conditions, ...).
	ErrInvalidFilter = errors.New("mqlite: invalid subscription filter")
	// ErrTopicNotFound: the named topic does not exist.
	ErrTopicNotFound = errors.New("mqlite: topic not found")
	// ErrTopicExists: CreateTopic with a name in use by a topic or a queue
	// (they share one namespace).
	ErrTopicExists = errors.New("mqlite: topic already exists")
	// ErrSubscriptionNotFound: no such subscription of that topic.
	ErrSubscriptionNotFound = errors.New("mqlite: subscription not found")
	// ErrInvalidSchedule: a schedule's name, Cron, TimeZone, Every or
	// CatchUp is malformed or out of range (see ScheduleOptions).
	ErrInvalidSchedule = errors.New("mqlite: invalid schedule")
	// ErrScheduleNotFound: the named schedule does not exist.
	ErrScheduleNotFound = errors.New("mqlite: schedule not found")
	// ErrScheduleExists: CreateSchedule with a name already in use by a
	// schedule.
	ErrScheduleExists = errors.New("mqlite: schedule already exists")
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

// The packages below the root wrap the root's sentinels (see internal/errs).
func init() {
	errs.ErrDBLocked, errs.ErrSchemaVersionMismatch, errs.ErrClosed = ErrDBLocked, ErrSchemaVersionMismatch, ErrClosed
	errs.ErrNoStore, errs.ErrMigrationNeeded, errs.ErrMigration = ErrNoStore, ErrMigrationNeeded, ErrMigration
	errs.ErrInvalidArgument, errs.ErrInvalidQueueName = ErrInvalidArgument, ErrInvalidQueueName
	errs.ErrInvalidMaxDelivery, errs.ErrInvalidLockDuration = ErrInvalidMaxDelivery, ErrInvalidLockDuration
	errs.ErrInvalidDedupWindow, errs.ErrInvalidTTL = ErrInvalidDedupWindow, ErrInvalidTTL
	errs.ErrInvalidOrdering, errs.ErrInvalidRetention = ErrInvalidOrdering, ErrInvalidRetention
	errs.ErrInvalidMessage, errs.ErrNilTx = ErrInvalidMessage, ErrNilTx
	errs.ErrQueueNotFound, errs.ErrQueueExists = ErrQueueNotFound, ErrQueueExists
	errs.ErrMessageTooLarge, errs.ErrDuplicateConflict = ErrMessageTooLarge, ErrDuplicateConflict
	errs.ErrNotAStore, errs.ErrLockLost, errs.ErrMessageNotFound = ErrNotAStore, ErrLockLost, ErrMessageNotFound
	errs.ErrDestinationExists, errs.ErrAttemptConflict = ErrDestinationExists, ErrAttemptConflict
	errs.ErrDiskFull, errs.ErrReadOnly = ErrDiskFull, ErrReadOnly
	errs.ErrInvalidTopicName, errs.ErrInvalidFilter = ErrInvalidTopicName, ErrInvalidFilter
	errs.ErrTopicNotFound, errs.ErrTopicExists = ErrTopicNotFound, ErrTopicExists
	errs.ErrSubscriptionNotFound = ErrSubscriptionNotFound
	errs.ErrInvalidSchedule, errs.ErrScheduleNotFound, errs.ErrScheduleExists = ErrInvalidSchedule, ErrScheduleNotFound, ErrScheduleExists
	errs.NewInvalid = func(kind error, detail string) error {
		return &InvalidArgumentError{Kind: kind, Detail: detail}
	}
}
