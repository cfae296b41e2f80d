package engine

import (
	"time"
	"unicode/utf8"

	"github.com/mqlite/mqlite/internal/errs"
)

// The limits on a message's fields; package mqlite exports them (see its
// MaxMessageIDLen).
const (
	MaxMessageIDLen    = 256
	MaxGroupIDLen      = 256
	MaxSubjectLen      = 1024
	MaxPropertiesBytes = 64 << 10
	MaxTTL             = 100 * 365 * 24 * time.Hour
	// MaxDelay bounds a DeliverAt (from now) and an Abandon's delay.
	MaxDelay = 365 * 24 * time.Hour
)

// Fields are the parts of a message a caller sets besides its body: the
// outbox's Message and a schedule's message check them alike.
type Fields struct {
	MessageID  string
	GroupID    string
	Subject    string
	Properties map[string]string
	TTL        time.Duration
}

// Validate checks every field of f against its bound and refuses text that
// is not UTF-8: it would be stored rewritten, and two distinct keys could
// become one.
func (f Fields) Validate() error {
	for _, v := range []struct {
		name, value string
		max         int
	}{
		{"MessageID", f.MessageID, MaxMessageIDLen},
		{"GroupID", f.GroupID, MaxGroupIDLen},
		{"Subject", f.Subject, MaxSubjectLen},
	} {
		if len(v.value) > v.max {
			return errs.Invalidf(errs.ErrInvalidMessage, "%s of %d bytes, at most %d", v.name, len(v.value), v.max)
		}
		if !utf8.ValidString(v.value) {
			return errs.Invalidf(errs.ErrInvalidMessage, "%s is not valid UTF-8", v.name)
		}
	}
	props := 0
	for k, v := range f.Properties {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return errs.Invalidf(errs.ErrInvalidMessage, "property %q is not valid UTF-8", k)
		}
		props += len(k) + len(v)
	}
	switch {
	case props > MaxPropertiesBytes:
		return errs.Invalidf(errs.ErrInvalidMessage, "Properties of %d bytes, at most %d", props, MaxPropertiesBytes)
	case f.TTL < 0 || f.TTL > MaxTTL:
		return errs.Invalidf(errs.ErrInvalidTTL, "TTL %v, want 0 to %v", f.TTL, MaxTTL)
	case f.TTL > 0 && f.TTL < time.Millisecond:
		return errs.Invalidf(errs.ErrInvalidTTL, "TTL %v is under a millisecond", f.TTL)
	}
	return nil
}
