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
// its Backoff's delay. A d of zero or less leaves the delay to the Backoff.
// RetryAfter(nil, d) is nil. Wrapped with Permanent, the Permanent wins.
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
		return r.After
	}
	return l.o.Backoff.delay(m.DeliveryCount)
}
