package wire

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/jobs"
)

// Stable error codes: the coarse class of an error, one per HTTP status
// family, as docs/api-reference-broker.md lists them. A client branches on
// Code; Reason names the exact cause.
const (
	CodeLockLost     = "lock_lost"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeInvalid      = "invalid"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeTooLarge     = "too_large"
	CodeUnavailable  = "unavailable"
	CodeUnsupported  = "unsupported"
	CodeInternal     = "internal"
)

// Reasons of the broker's own errors, which have no root sentinel.
const (
	ReasonMalformed      = "malformed_request"
	ReasonBodyTooLarge   = "body_too_large"
	ReasonBatchTooLarge  = "batch_too_large"
	ReasonNoKey          = "no_key"
	ReasonBadKey         = "unknown_or_revoked_key"
	ReasonRole           = "wrong_role"
	ReasonQueue          = "wrong_queue"
	ReasonDraining       = "draining"
	ReasonStandby        = "standby" // a hot standby waiting for the file
	ReasonBusy           = "too_many_long_polls"
	ReasonNoRoute        = "no_such_endpoint"
	ReasonKeyNotFound    = "key_not_found"
	ReasonTimeout        = "timeout"
	ReasonInternal       = "internal"
	ReasonBackupDisabled = "backup_disabled"
	ReasonBadSignature   = "bad_signature"   // an inbound webhook's signature, timestamp or source
	ReasonNoDedupWindow  = "no_dedup_window" // an inbound source's queue lost the window it needs
	ReasonInboundBusy    = "inbound_busy"    // too many inbound webhook bodies held at once
)

// Error is the body of every error response: {"error": {...}}.
type Error struct {
	// Code is the stable class: one of the Code constants.
	Code string `json:"code"`
	// Reason is the exact cause, stable too: the root sentinel's name in
	// snake case (lock_lost, queue_not_found, invalid_lock_duration, ...)
	// or one of the Reason constants.
	Reason string `json:"reason"`
	// Message is for people.
	Message string `json:"message"`
}

// ErrorResponse wraps Error.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// sentinel is one row of the error table.
type sentinel struct {
	err    error
	reason string
	code   string
	status int
}

// ErrAlreadySettled comes before ErrLockLost, which matches it too: a
// client tells a delivery settled already from a lost lease.
// ErrLockLost is 409 Conflict, not 410 Gone: the message usually still
// exists and comes again; what conflicts is the request's token with the
// delivery's current one. The specific invalid sentinels come before
// ErrInvalidArgument, which matches all of them.
var sentinels = []sentinel{
	{mqlite.ErrAlreadySettled, "already_settled", CodeLockLost, http.StatusConflict},
	{mqlite.ErrLockLost, "lock_lost", CodeLockLost, http.StatusConflict},
	{mqlite.ErrQueueNotFound, "queue_not_found", CodeNotFound, http.StatusNotFound},
	{mqlite.ErrTopicNotFound, "topic_not_found", CodeNotFound, http.StatusNotFound},
	{mqlite.ErrSubscriptionNotFound, "subscription_not_found", CodeNotFound, http.StatusNotFound},
	{mqlite.ErrScheduleNotFound, "schedule_not_found", CodeNotFound, http.StatusNotFound},
	{mqlite.ErrMessageNotFound, "message_not_found", CodeNotFound, http.StatusNotFound},
	{mqlite.ErrDuplicateConflict, "duplicate_conflict", CodeConflict, http.StatusConflict},
	{mqlite.ErrAttemptConflict, "attempt_conflict", CodeConflict, http.StatusConflict},
	{mqlite.ErrQueueExists, "queue_exists", CodeConflict, http.StatusConflict},
	{mqlite.ErrTopicExists, "topic_exists", CodeConflict, http.StatusConflict},
	{mqlite.ErrScheduleExists, "schedule_exists", CodeConflict, http.StatusConflict},
	{mqlite.ErrDestinationExists, "destination_exists", CodeConflict, http.StatusConflict},
	{mqlite.ErrMessageTooLarge, "message_too_large", CodeTooLarge, http.StatusRequestEntityTooLarge},
	{mqlite.ErrUnsupported, "unsupported", CodeUnsupported, http.StatusNotImplemented},
	{mqlite.ErrInvalidQueueName, "invalid_queue_name", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidTopicName, "invalid_topic_name", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidMaxDelivery, "invalid_max_delivery", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidLockDuration, "invalid_lock_duration", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidDedupWindow, "invalid_dedup_window", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidTTL, "invalid_ttl", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidOrdering, "invalid_ordering", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidRetention, "invalid_retention", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidMessage, "invalid_message", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidFilter, "invalid_filter", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidSchedule, "invalid_schedule", CodeInvalid, http.StatusBadRequest},
	{jobs.ErrInvalidKind, "invalid_job_kind", CodeInvalid, http.StatusBadRequest},
	{jobs.ErrUniqueWindow, "unique_window", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrInvalidArgument, "invalid_argument", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrNilTx, "invalid_argument", CodeInvalid, http.StatusBadRequest},
	{mqlite.ErrClosed, "closed", CodeUnavailable, http.StatusServiceUnavailable},
	{mqlite.ErrDiskFull, "disk_full", CodeUnavailable, http.StatusServiceUnavailable},
	{mqlite.ErrReadOnly, "read_only", CodeUnavailable, http.StatusServiceUnavailable},
	{mqlite.ErrDBLocked, "db_locked", CodeUnavailable, http.StatusServiceUnavailable},
	{mqlite.ErrSchemaVersionMismatch, "schema_version_mismatch", CodeUnavailable, http.StatusServiceUnavailable},
	{mqlite.ErrNotAStore, "internal", CodeInternal, http.StatusInternalServerError},
}

// statusOf gives the HTTP status of the broker's own codes.
var statusOf = map[string]int{
	CodeLockLost:     http.StatusConflict,
	CodeNotFound:     http.StatusNotFound,
	CodeConflict:     http.StatusConflict,
	CodeInvalid:      http.StatusBadRequest,
	CodeUnauthorized: http.StatusUnauthorized,
	CodeForbidden:    http.StatusForbidden,
	CodeTooLarge:     http.StatusRequestEntityTooLarge,
	CodeUnavailable:  http.StatusServiceUnavailable,
	CodeUnsupported:  http.StatusNotImplemented,
	CodeInternal:     http.StatusInternalServerError,
}

// Status is the HTTP status of code; 500 for an unknown one.
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorOf encodes err: the first sentinel of the table it matches gives the
// code and the reason; context errors are unavailable (timeout); anything
// else is internal. nil gives nil.
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return &Error{Code: s.code, Reason: s.reason, Message: err.Error()}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &Error{Code: CodeUnavailable, Reason: ReasonTimeout, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Reason: ReasonInternal, Message: err.Error()}
}

// Err decodes e into an error that matches the root sentinel of its reason
// with errors.Is (an invalid one is an *mqlite.InvalidArgumentError, so it
// matches ErrInvalidArgument too). A reason without a sentinel gives an
// error carrying e's text only; callers wrap it with their own sentinels.
// A nil e gives nil.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	for _, s := range sentinels {
		if s.reason != e.Reason {
			continue
		}
		if s.code == CodeInvalid {
			return &mqlite.InvalidArgumentError{Kind: s.err, Detail: strings.TrimPrefix(e.Message, s.err.Error()+": ")}
		}
		return &RemoteError{E: *e, sentinel: s.err}
	}
	return &RemoteError{E: *e}
}

// RemoteError is an error the broker returned: its code, reason and
// message, matching the root sentinel of its reason with errors.Is.
type RemoteError struct {
	E        Error
	sentinel error
}

// Error returns the broker's message.
func (e *RemoteError) Error() string {
	if e.E.Message != "" {
		return e.E.Message
	}
	return e.E.Code + ": " + e.E.Reason
}

// Unwrap returns the root sentinel of the reason, or nil.
func (e *RemoteError) Unwrap() error { return e.sentinel }

// ownReasons are the reasons of the broker's own errors (the Reason
// constants); a test keeps the list whole.
var ownReasons = []string{ReasonMalformed, ReasonBodyTooLarge, ReasonBatchTooLarge, ReasonNoKey, ReasonBadKey,
	ReasonRole, ReasonQueue, ReasonDraining, ReasonStandby, ReasonBusy, ReasonNoRoute, ReasonKeyNotFound,
	ReasonTimeout, ReasonInternal, ReasonBackupDisabled, ReasonBadSignature, ReasonNoDedupWindow,
	ReasonInboundBusy}

// ErrorTable lists what an error response can say: every code with its
// HTTP status, and every reason (the sentinels' and the broker's own), for
// the broker's OpenAPI document.
func ErrorTable() (codes map[string]int, reasons []string) {
	codes = make(map[string]int, len(statusOf))
	for c, s := range statusOf {
		codes[c] = s
	}
	seen := map[string]bool{}
	for _, s := range sentinels {
		if !seen[s.reason] {
			seen[s.reason] = true
			reasons = append(reasons, s.reason)
		}
	}
	for _, r := range ownReasons {
		if !seen[r] {
			seen[r] = true
			reasons = append(reasons, r)
		}
	}
	return codes, reasons
}
