// Package errs holds the sentinel errors shared by mqlite's packages. The root
// package re-exports each one, so callers match them with errors.Is against
// mqlite.ErrXxx; this package exists only to avoid an import cycle between the
// root package and the engine.
package errs

import "errors"

// Sentinels; see the root package for their documentation.
var (
	ErrDBLocked              = errors.New("mqlite: database is locked by another store")
	ErrSchemaVersionMismatch = errors.New("mqlite: schema version mismatch")
	ErrClosed                = errors.New("mqlite: store is closed")
	ErrInvalidArgument       = errors.New("mqlite: invalid argument")
	ErrInvalidQueueName      = errors.New("mqlite: invalid queue name")
	ErrInvalidMaxDelivery    = errors.New("mqlite: invalid max delivery count")
	ErrInvalidLockDuration   = errors.New("mqlite: invalid lock duration")
	ErrInvalidDedupWindow    = errors.New("mqlite: invalid dedup window")
	ErrInvalidTTL            = errors.New("mqlite: invalid time to live")
	ErrInvalidOrdering       = errors.New("mqlite: invalid ordering")
	ErrInvalidRetention      = errors.New("mqlite: invalid dead-letter retention")
	ErrInvalidMessage        = errors.New("mqlite: invalid message")
	ErrNilTx                 = errors.New("mqlite: nil transaction")
	ErrQueueNotFound         = errors.New("mqlite: queue not found")
	ErrQueueExists           = errors.New("mqlite: queue already exists")
	ErrMessageTooLarge       = errors.New("mqlite: message too large")
	ErrDuplicateConflict     = errors.New("mqlite: duplicate message id with a different body")
	ErrNotAStore             = errors.New("mqlite: transaction does not belong to an mqlite store")
	ErrLockLost              = errors.New("mqlite: lock lost")
	ErrMessageNotFound       = errors.New("mqlite: message not found")
	ErrDestinationExists     = errors.New("mqlite: backup destination exists")
)

// Invalid is the error for one bad input value. It matches both its field's
// sentinel and ErrInvalidArgument with errors.Is.
type Invalid struct {
	Kind   error  // the field's sentinel, such as ErrInvalidLockDuration
	Detail string // what was wrong, for people
}

// Error implements error.
func (e *Invalid) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap lets errors.Is see both the field's sentinel and ErrInvalidArgument.
func (e *Invalid) Unwrap() []error { return []error{e.Kind, ErrInvalidArgument} }

// Newf returns an *Invalid for kind with a formatted detail.
func Newf(kind error, detail string) error { return &Invalid{Kind: kind, Detail: detail} }

// IsLockLost reports whether err is ErrLockLost.
func IsLockLost(err error) bool { return errors.Is(err, ErrLockLost) }
