package driver

import (
	"errors"
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
	// MaxPriority is the highest priority of a message; the lowest, and
	// the default, is 0.
	MaxPriority = 9
)

// ReceiptTTLMS is how long a settlement receipt and a receive attempt can
// replay: about 30 minutes, checked at statement time.
const ReceiptTTLMS = 30 * 60 * 1000

// Dead-letter reasons an engine writes.
const (
	// ReasonMaxDelivery is the dead-letter reason of a message whose last
	// allowed delivery ended without a settlement.
	ReasonMaxDelivery = "max delivery count exceeded"
	// ReasonTTL is the dead-letter reason of a message whose time to
	// live passed before it was consumed, on a queue that dead-letters
	// expired messages.
	ReasonTTL = "ttl expired"
	// DescLeaseExpired is the dead-letter description of a message whose
	// last allowed delivery's lease lapsed (the reaper's, with
	// ReasonMaxDelivery).
	DescLeaseExpired = "the lease of the last allowed delivery expired"
	// DescTTL is the dead-letter description that goes with ReasonTTL.
	DescTTL = "the time to live passed before the message was consumed"
)

// ErrSpentDeferred is returned by ClaimDeferred after it dead-lettered a
// deferred message that had no delivery left. The caller commits that
// change, then reports the message as not found.
var ErrSpentDeferred = errors.New("deferred message had no delivery left and was dead-lettered")

// Fields are the parts of a message a caller sets besides its body: the
// outbox's Message and a schedule's message check them alike.
type Fields struct {
	MessageID  string
	GroupID    string
	Subject    string
	Properties map[string]string
	TTL        time.Duration
	Priority   int
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
	case f.Priority < 0 || f.Priority > MaxPriority:
		return errs.Invalidf(errs.ErrInvalidMessage, "Priority %d, want 0 to %d", f.Priority, MaxPriority)
	}
	return nil
}

// SendMessage is one message to enqueue, already validated.
type SendMessage struct {
	Body       []byte
	MessageID  string            // "" = none
	GroupID    string            // "" = none
	Subject    string            // "" = none
	Properties string            // JSON object, "" = none
	Props      map[string]string // the same, for subscription filters
	DeliverAt  int64             // epoch ms; 0 = now
	TTLMS      int64             // 0 = the queue's default
	Priority   int64             // 0 to MaxPriority: a claim takes the highest first
}

// Size is what the message counts against the store's MaxMessageBytes: its
// body and its metadata.
func (m SendMessage) Size() int64 {
	return int64(len(m.Body) + len(m.MessageID) + len(m.GroupID) + len(m.Subject) + len(m.Properties))
}

// SendResult is the outcome of one message of a send.
type SendResult struct {
	Seq       int64
	Duplicate bool // the message matched a dedup row; Seq is the original's
	Err       error
	Copies    []Copy // every queue's row: one for a queue, one per matching subscription
}

// Copy is one row a send wrote (or found, for a duplicate) in one queue: a
// send to a queue has one, a send to a topic one per matching subscription.
type Copy struct {
	Queue     string
	Seq       int64
	Duplicate bool
	Err       error // this copy's own error (a dedup conflict)
}

// Row is one message as the engine reads it: claimed, peeked or
// dead-lettered. Times are epoch milliseconds. It is also the JSON of a
// recorded receive attempt.
type Row struct {
	Seq                   int64   `json:"seq"`
	State                 string  `json:"state,omitempty"`
	DeliveryCount         int64   `json:"dc"`
	EnqueuedAt            int64   `json:"enq"`
	ExpiresAt             int64   `json:"exp,omitempty"`
	VisibleAt             int64   `json:"vis,omitempty"`
	MessageID             string  `json:"mid,omitempty"`
	GroupID               *string `json:"gid,omitempty"`
	Subject               string  `json:"sub,omitempty"`
	Properties            string  `json:"props,omitempty"`
	Body                  []byte  `json:"body"`
	LockToken             string  `json:"tok,omitempty"`
	LockedUntil           int64   `json:"until,omitempty"`
	DeadLetterReason      string  `json:"dlr,omitempty"`
	DeadLetterDescription string  `json:"dld,omitempty"`
	DeadLetteredAt        int64   `json:"dla,omitempty"`
	LastError             string  `json:"lerr,omitempty"`
	Priority              int64   `json:"pri,omitempty"`
	// Attempts is the message's history of failed deliveries, oldest
	// first: at most the store's bound (ConnConfig.AttemptHistory) of the
	// last ones; nil for a message that never failed.
	Attempts []Attempt `json:"att,omitempty"`
}

// Size is the row's size as Config.MaxMessageBytes counts it
// (SendMessage.Size): its body and its metadata.
func (r Row) Size() int64 {
	n := len(r.Body) + len(r.MessageID) + len(r.Subject) + len(r.Properties)
	if r.GroupID != nil {
		n += len(*r.GroupID)
	}
	return int64(n)
}

// ClaimRequest is one Receive.
type ClaimRequest struct {
	Queue     Queue
	Max       int
	Delete    bool   // receive-and-delete
	AttemptID string // "" = none
	// MaxBytes, when positive, bounds the sizes of the claimed messages;
	// the first claimable message comes whatever its size.
	MaxBytes int64
	Now      int64
	// Bounds, when not nil, lets the claim skip the due probe while
	// nothing of the queue can be due (the store's ConnConfig.Bounds).
	Bounds *DueBounds
}

// PeekRequest is one page of Peek or PeekDeadLetters.
type PeekRequest struct {
	Queue   string
	FromSeq int64 // the first sequence number to read
	Max     int
	// MaxBytes, when positive, ends the page before the sizes of its
	// messages (Row.Size) add up past it; the first message comes whatever
	// its size.
	MaxBytes int64
}

// FindRequest is one page of Find: the messages of Queue from FromSeq on
// that match every filter set, among at most ScanMax messages of the queue
// examined.
type FindRequest struct {
	Queue    string
	FromSeq  int64
	Max      int
	MaxBytes int64 // as PeekRequest's
	// State is one state, or "" for every live state (all but
	// dead_lettered and completed): it picks the partial indexes the page
	// reads; an unknown one is an error.
	State string
	// SubjectPrefix, MessageID and Property filter when not empty.
	SubjectPrefix string
	MessageID     string
	PropertyKey   string
	PropertyValue string
	// ScanMax bounds the messages of the queue (in State) the page
	// examines: the filters on subject, MessageID and property have no
	// index, so a page reads the rows of at most ScanMax messages, the
	// first ScanMax of the queue's in State from FromSeq on, and returns
	// where it stopped.
	ScanMax int
}

// FindResult is a page of Find. NextSeq is where the next page starts, 0
// when the queue has no more messages to examine.
type FindResult struct {
	Rows    []Row
	NextSeq int64
	Scanned int
}

// StateStats is what Stats reports for one state of a queue.
type StateStats struct {
	Count      int64
	Bytes      int64 // sum of the body lengths
	OldestEnq  int64 // enqueued_at of the oldest message, epoch ms; 0 when none
	OldestDead int64 // dead_lettered_at of the oldest dead letter (dead_lettered only)
}

// DedupEntry is what LookupDedup finds of a MessageID in a queue.
type DedupEntry struct {
	// Found reports a live dedup row (inside its window) for the key.
	Found bool
	// Seq is the message the row points at; 0 when none was found.
	Seq int64
	// Unfinished reports that the message Seq is still waiting or running:
	// active, scheduled, locked or deferred (not completed, dead-lettered
	// or removed).
	Unfinished bool
	// Properties are the message's properties as stored (a JSON object,
	// "" for none); "" when it is finished.
	Properties string
	// WindowMS is the queue's dedup window (0: off).
	WindowMS int64
	// NowMS is the store's now (its Clock), read in the same statement.
	NowMS int64
}

// CommitRecord is the record of a committed request of the broker: a
// digest of its items and its answer.
type CommitRecord struct {
	Request string
	Result  []byte
}
