// Package errs holds mqlite's sentinel errors for the packages below the
// root (the engine, the schema), which cannot import the root without a
// cycle. Each sentinel is a constant of type Sentinel, an error that is its
// own text: package mqlite declares its exported ErrXxx with the same text
// (TestSentinelsMatchTheRoot holds the two lists to each other), and two
// Sentinels of one text are equal, so errors.Is matches an error from any
// package against mqlite.ErrXxx. A constant has its value from the start:
// no sentinel can be nil, whatever runs first.
package errs

import (
	"errors"
	"fmt"
)

// Sentinel is an error that is its own text; see package mqlite for what
// each one means.
type Sentinel string

// Error returns the sentinel's text.
func (e Sentinel) Error() string { return string(e) }

// Is reports whether e matches target beyond equality: ErrAlreadySettled
// is a kind of ErrLockLost, so a caller that handles a lost lock handles it.
func (e Sentinel) Is(target error) bool {
	return e == ErrAlreadySettled && target == ErrLockLost
}

// The sentinels, by the names and with the texts of package mqlite.
const (
	ErrDBLocked              Sentinel = "mqlite: database is locked by another store"
	ErrSchemaVersionMismatch Sentinel = "mqlite: schema version mismatch"
	ErrNoStore               Sentinel = "mqlite: no store"
	ErrMigrationNeeded       Sentinel = "mqlite: the store needs a migration"
	ErrMigration             Sentinel = "mqlite: migration failed"
	ErrClosed                Sentinel = "mqlite: store is closed"
	ErrInsideTx              Sentinel = "mqlite: store call inside the transaction that holds the store's connection"
	ErrInvalidArgument       Sentinel = "mqlite: invalid argument"
	ErrInvalidQueueName      Sentinel = "mqlite: invalid queue name"
	ErrInvalidMaxDelivery    Sentinel = "mqlite: invalid max delivery count"
	ErrInvalidLockDuration   Sentinel = "mqlite: invalid lock duration"
	ErrInvalidDedupWindow    Sentinel = "mqlite: invalid dedup window"
	ErrInvalidTTL            Sentinel = "mqlite: invalid time to live"
	ErrInvalidOrdering       Sentinel = "mqlite: invalid ordering"
	ErrInvalidRetention      Sentinel = "mqlite: invalid dead-letter retention"
	ErrInvalidMessage        Sentinel = "mqlite: invalid message"
	ErrNilTx                 Sentinel = "mqlite: nil transaction"
	ErrQueueNotFound         Sentinel = "mqlite: queue not found"
	ErrQueueExists           Sentinel = "mqlite: queue already exists"
	ErrMessageTooLarge       Sentinel = "mqlite: message too large"
	ErrDuplicateConflict     Sentinel = "mqlite: duplicate message id with a different body"
	ErrNotAStore             Sentinel = "mqlite: transaction does not belong to an mqlite store"
	ErrLockLost              Sentinel = "mqlite: lock lost"
	ErrAlreadySettled        Sentinel = "mqlite: lock lost: delivery already settled"
	ErrMessageNotFound       Sentinel = "mqlite: message not found"
	ErrDestinationExists     Sentinel = "mqlite: backup destination exists"
	ErrAttemptConflict       Sentinel = "mqlite: attempt id reused with other options"
	ErrDiskFull              Sentinel = "mqlite: disk full"
	ErrReadOnly              Sentinel = "mqlite: store file is read-only"
	ErrInvalidTopicName      Sentinel = "mqlite: invalid topic name"
	ErrInvalidFilter         Sentinel = "mqlite: invalid subscription filter"
	ErrTopicNotFound         Sentinel = "mqlite: topic not found"
	ErrTopicExists           Sentinel = "mqlite: topic already exists"
	ErrSubscriptionNotFound  Sentinel = "mqlite: subscription not found"
	ErrInvalidSchedule       Sentinel = "mqlite: invalid schedule"
	ErrScheduleNotFound      Sentinel = "mqlite: schedule not found"
	ErrScheduleExists        Sentinel = "mqlite: schedule already exists"
	ErrUnsupported           Sentinel = "mqlite: not supported by this engine"
	ErrTargetNotEmpty        Sentinel = "mqlite: copy target is not empty"
)

// NewInvalid builds the error of one bad input value (the root package's
// InvalidArgumentError, a type the engine cannot name); package mqlite sets
// it in its init, and TestSentinelsMatchTheRoot checks that it did.
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
