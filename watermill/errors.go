package watermill

import "errors"

// Errors of this package. Every other error matches one of the root
// package's sentinels (mqlite.ErrQueueNotFound, mqlite.ErrInvalidArgument,
// ...) with errors.Is.
var (
	// ErrPublisherClosed is returned by Publish after Close.
	ErrPublisherClosed = errors.New("mqlite/watermill: publisher is closed")
	// ErrSubscriberClosed is returned by Subscribe after Close.
	ErrSubscriberClosed = errors.New("mqlite/watermill: subscriber is closed")
)
