package mqlite

import "github.com/mqlite/mqlite/internal/errs"

// Errors returned by mqlite. Match them with errors.Is; the returned errors
// wrap these with detail.
var (
	// ErrDBLocked is returned by Open when another store, in this process or
	// another, holds the file. One file has one writer: run the broker to
	// share it between processes.
	ErrDBLocked = errs.ErrDBLocked
	// ErrSchemaVersionMismatch is returned by Open for a file written by an
	// incompatible mqlite. The file is left untouched.
	ErrSchemaVersionMismatch = errs.ErrSchemaVersionMismatch
	// ErrClosed is returned by calls on a closed Store.
	ErrClosed = errs.ErrClosed
	// ErrInvalidArgument matches every validation error; each also matches
	// the sentinel of its field, such as ErrInvalidLockDuration.
	ErrInvalidArgument = errs.ErrInvalidArgument
	// ErrInvalidQueueName: a queue name is empty, too long or has a
	// character outside [A-Za-z0-9._:-].
	ErrInvalidQueueName = errs.ErrInvalidQueueName
	// ErrInvalidMaxDelivery: QueueOptions.MaxDeliveryCount out of range.
	ErrInvalidMaxDelivery = errs.ErrInvalidMaxDelivery
	// ErrInvalidLockDuration: QueueOptions.LockDuration out of range.
	ErrInvalidLockDuration = errs.ErrInvalidLockDuration
	// ErrInvalidDedupWindow: QueueOptions.DedupWindow out of range.
	ErrInvalidDedupWindow = errs.ErrInvalidDedupWindow
	// ErrInvalidTTL: a negative or out-of-range time to live.
	ErrInvalidTTL = errs.ErrInvalidTTL
	// ErrInvalidOrdering: an unknown Ordering, or a change of ordering on a
	// queue that holds messages.
	ErrInvalidOrdering = errs.ErrInvalidOrdering
	// ErrInvalidRetention: a negative dead-letter retention bound.
	ErrInvalidRetention = errs.ErrInvalidRetention
	// ErrInvalidMessage: a message field is malformed (too long an id, a
	// group id on a message that cannot carry one, ...).
	ErrInvalidMessage = errs.ErrInvalidMessage
	// ErrNilTx is returned by the outbox when it is given no transaction.
	ErrNilTx = errs.ErrNilTx
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = errs.ErrQueueNotFound
	// ErrQueueExists: CreateQueue with a name already in use.
	ErrQueueExists = errs.ErrQueueExists
	// ErrMessageTooLarge: a body over Options.MaxMessageBytes.
	ErrMessageTooLarge = errs.ErrMessageTooLarge
	// ErrDuplicateConflict: a MessageID seen inside the dedup window with a
	// different body. The original message is unchanged.
	ErrDuplicateConflict = errs.ErrDuplicateConflict
	// ErrNotAStore: the transaction given to the outbox is not on a
	// connection of an open mqlite Store.
	ErrNotAStore = errs.ErrNotAStore
	// ErrLockLost: a settlement or renewal presented a token that is not
	// the current one, or a lease that has expired.
	ErrLockLost = errs.ErrLockLost
	// ErrMessageNotFound: no message with that sequence number in that
	// state.
	ErrMessageNotFound = errs.ErrMessageNotFound
	// ErrDestinationExists: Backup was given a path that already exists;
	// a backup never overwrites a file.
	ErrDestinationExists = errs.ErrDestinationExists
)
