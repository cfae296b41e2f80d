package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/mqlite/mqlite"
)

// RetryAfterError is a handler error that names its own retry delay: Loop
// abandons the message for After instead of its Backoff's delay. It is
// what a far side's "retry after" (an HTTP Retry-After header, a broker's
// throttle) becomes. Create one with RetryAfter.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

// Error returns the wrapped error's text and the delay.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.Err, e.After)
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that Loop abandons the message for d instead of
// its Backoff's delay. A d of zero or less leaves the delay to the Backoff;
// one past mqlite.MaxDelay is cut to it. RetryAfter(nil, d) is nil.
// Wrapped with Permanent, the Permanent wins.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, After: d}
}

// DeadLetterError is a Permanent error that carries the dead letter's
// reason and description itself, such as a far side's status and answer.
// Create one with DeadLetter.
type DeadLetterError struct {
	Reason      string
	Description string
}

// Error returns the reason and the description.
func (e *DeadLetterError) Error() string {
	if e.Description == "" {
		return e.Reason
	}
	return e.Reason + ": " + e.Description
}

// DeadLetter returns a Permanent error that Loop rejects with reason and
// description as given, instead of the error's text as the reason.
func DeadLetter(reason, description string) error {
	return Permanent(&DeadLetterError{Reason: reason, Description: description})
}

// deadLetterOf returns the reason and description Loop rejects with for a
// Permanent error: a DeadLetterError's own, else the error's text and none;
// each cut to what the store takes (mqlite.MaxReasonLen and
// mqlite.MaxDescriptionLen bytes of valid UTF-8).
func deadLetterOf(err error) (why, description string) {
	if d, ok := errors.AsType[*DeadLetterError](err); ok {
		return cut(d.Reason, mqlite.MaxReasonLen), cut(d.Description, mqlite.MaxDescriptionLen)
	}
	return reason(err), ""
}

// retryDelay is how long Loop abandons m for after its handler failed
// with err: the error's RetryAfter, else the Backoff's delay.
func (l *loop) retryDelay(m mqlite.Message, err error) time.Duration {
	if r, ok := errors.AsType[*RetryAfterError](err); ok && r.After > 0 {
		// The store refuses an abandon past MaxDelay: the message would
		// come back at its lease's end and its handler run again, each time.
		return min(r.After, mqlite.MaxDelay)
	}
	return l.o.Backoff.delay(m.DeliveryCount)
}

// programmingError reports whether err, a handler's, a step's or its
// commit's, says that the code is wrong rather than that the moment is: the
// same error comes on every delivery of every message, so a retry only
// repeats what the handler did before it failed (its call to another
// service). They are ErrNoSQL (a step that wants SQL, run over the broker),
// ErrTxEnded (a step that ended LoopTx's transaction itself),
// mqlite.ErrInsideTx (a store call with the context of the transaction that
// holds the store's connection), mqlite.ErrNotAStore and mqlite.ErrNilTx
// (the outbox given a transaction that is not the store's, or none). Loop
// and LoopTx dead-letter the message at once and stop (see Loop).
func programmingError(err error) bool {
	for _, target := range [...]error{ErrNoSQL, ErrTxEnded, mqlite.ErrInsideTx, mqlite.ErrNotAStore, mqlite.ErrNilTx} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// refused reports whether err, a step's or its commit's, is the store's
// (or the broker's) refusal of what the step wrote as invalid
// (mqlite.ErrInvalidArgument, which every validation error matches, or
// mqlite.ErrMessageTooLarge): the same step writes the same on every
// delivery of this message, so LoopTx dead-letters it at once and goes on
// with the others. A handler's own error is not judged so: it may come
// from anywhere.
func refused(err error) bool {
	return errors.Is(err, mqlite.ErrInvalidArgument) || errors.Is(err, mqlite.ErrMessageTooLarge)
}

// notRetried is the description of the dead letter of a message whose
// error was a programming error or a refusal.
const notRetried = "consumer: not retried: the same error would come on every delivery"
