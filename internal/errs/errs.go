// Package errs carries mqlite's sentinel errors to the packages below the
// root (the engine, the schema, the outbox), which cannot import the root
// without a cycle. The root package creates and documents every sentinel and
// stores it here when it is initialised, so errors.Is matches the errors of
// every package against mqlite.ErrXxx. Every program that reaches these
// packages through package mqlite has it initialised before its main runs.
package errs

import (
	"errors"
	"fmt"
)

// The sentinels; see the root package for their documentation. Package
// mqlite sets each one in its init.
var (
	ErrDBLocked              error
	ErrSchemaVersionMismatch error
	ErrNoStore               error
	ErrMigrationNeeded       error
	ErrMigration             error
	ErrClosed                error
	ErrInvalidArgument       error
	ErrInvalidQueueName      error
	ErrInvalidMaxDelivery    error
	ErrInvalidLockDuration   error
	ErrInvalidDedupWindow    error
	ErrInvalidTTL            error
	ErrInvalidOrdering       error
	ErrInvalidRetention      error
	ErrInvalidMessage        error
	ErrNilTx                 error
	ErrQueueNotFound         error
	ErrQueueExists           error
	ErrMessageTooLarge       error
	ErrDuplicateConflict     error
	ErrNotAStore             error
	ErrLockLost              error
	ErrMessageNotFound       error
	ErrDestinationExists     error
	ErrAttemptConflict       error
	ErrDiskFull              error
	ErrReadOnly              error
	ErrInvalidTopicName      error
	ErrInvalidFilter         error
	ErrTopicNotFound         error
	ErrTopicExists           error
	ErrSubscriptionNotFound  error
	ErrInvalidSchedule       error
	ErrScheduleNotFound      error
	ErrScheduleExists        error
)

// NewInvalid builds the error of one bad input value (the root package's
// InvalidArgumentError); package mqlite sets it in its init.
var NewInvalid func(kind error, detail string) error

// Invalidf returns the error of one bad input value: kind is the field's
// sentinel (such as ErrInvalidLockDuration, or ErrInvalidArgument when the
// field has none of its own) and the detail is formatted from format and
// args as by fmt.Sprintf.
func Invalidf(kind error, format string, args ...any) error {
	return NewInvalid(kind, fmt.Sprintf(format, args...))
}

// IsLockLost reports whether err is ErrLockLost.
func IsLockLost(err error) bool { return errors.Is(err, ErrLockLost) }
