package mqlite

import (
	"encoding/json"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// Limits on the fields of a message. A field over its limit, or text that
// is not valid UTF-8, is ErrInvalidMessage; the whole message (body and
// fields together) is also bounded by Config.MaxMessageBytes
// (ErrMessageTooLarge).
const (
	MaxMessageIDLen = 256  // bytes of MessageID
	MaxGroupIDLen   = 256  // bytes of GroupID
	MaxSubjectLen   = 1024 // bytes of Subject
	// MaxPropertiesBytes bounds the Properties of a message: the sum of
	// the lengths of its keys and values.
	MaxPropertiesBytes = 64 << 10
)

// MaxDelay bounds how far ahead of the store's now a message may be made
// due: a send's DeliverAt (ErrInvalidMessage past it) and Abandon's delay
// (ErrInvalidArgument past it) are at most 365 days away, and the broker
// answers 400 past the same bound. A message parked until then is made due
// at once by Store.DeliverNow.
const MaxDelay = 365 * 24 * time.Hour

// Lock identifies one delivery of one message: what every settlement and
// renewal presents.
type Lock struct {
	Queue string
	Seq   int64
	// Token is the delivery's fencing token: 128 random bits, hex.
	Token string
}

// Message is a message as received or peeked.
type Message struct {
	// Queue is the queue the message is in.
	Queue string
	// Seq is the message's sequence number: strictly increasing within the
	// file, never reused.
	Seq int64
	// Body is the payload; never nil.
	Body []byte
	// MessageID, GroupID, Subject and Properties are as sent.
	MessageID  string
	GroupID    string
	Subject    string
	Properties map[string]string
	// DeliveryCount is how many times the message has been handed out,
	// this delivery included.
	DeliveryCount int
	// EnqueuedAt is when the message was sent, by the store's Clock.
	EnqueuedAt time.Time
	// ExpiresAt is the end of the message's time to live; zero for none.
	ExpiresAt time.Time
	// LockToken and LockedUntil are the delivery's fencing token and lease;
	// empty and zero for ReceiveAndDelete and Peek.
	LockToken   string
	LockedUntil time.Time
	// State is the message's state; set by Peek and PeekDeadLetters.
	State State
	// VisibleAt is when a scheduled message falls due (Peek only).
	VisibleAt time.Time
	// DeadLetterReason, DeadLetterDescription and DeadLetteredAt say why
	// and when the message was dead-lettered (PeekDeadLetters only).
	DeadLetterReason      string
	DeadLetterDescription string
	DeadLetteredAt        time.Time
	// LastError is the last reason a delivery of the message came back:
	// the reason of AbandonWithReason (consumer.Loop's handler error, the
	// relay's sink error); empty when none was given. Kept with the
	// message (Receive, Peek, PeekDeadLetters), gone with it.
	LastError string
}

// Lock returns the message's lock, for settlement.
func (m Message) Lock() Lock { return Lock{Queue: m.Queue, Seq: m.Seq, Token: m.LockToken} }

func toMessage(queue string, c driver.Row) Message {
	m := Message{
		Queue: queue, Seq: c.Seq, Body: c.Body, MessageID: c.MessageID, Subject: c.Subject,
		DeliveryCount: int(c.DeliveryCount), EnqueuedAt: fromMillis(c.EnqueuedAt),
		ExpiresAt: fromMillis(c.ExpiresAt), LockToken: c.LockToken, LockedUntil: fromMillis(c.LockedUntil),
		DeadLetterReason: c.DeadLetterReason, DeadLetterDescription: c.DeadLetterDescription,
		DeadLetteredAt: fromMillis(c.DeadLetteredAt), LastError: c.LastError,
	}
	if c.GroupID != nil {
		m.GroupID = *c.GroupID
	}
	if m.Body == nil {
		m.Body = []byte{}
	}
	if c.Properties != "" {
		_ = json.Unmarshal([]byte(c.Properties), &m.Properties) // written by the outbox as a JSON object
	}
	return m
}

// State is where a message stands, as Message.State reports it and
// PurgeOptions.State takes it. docs/concepts.md draws the transitions.
type State string

// The states of a message. A completed message has none of them: no read
// returns it, and its row stays, without its body, as the completion's
// receipt until the janitor deletes it (keeping a receipt of its own for
// the rest of the replay window).
const (
	// StateActive: claimable now (or as soon as its group lets it).
	StateActive State = "active"
	// StateScheduled: claimable from its VisibleAt (DeliverAt, or Abandon
	// with a delay).
	StateScheduled State = "scheduled"
	// StateLocked: handed out; its lease runs until LockedUntil.
	StateLocked State = "locked"
	// StateDeferred: set aside by Defer; only ReceiveDeferred claims it.
	StateDeferred State = "deferred"
	// StateDeadLettered: out of the flow until Redrive or Purge.
	StateDeadLettered State = "dead_lettered"
)

// Dead-letter reasons written by mqlite itself (Reject writes the caller's).
const (
	// ReasonMaxDelivery: the last allowed delivery ended without a
	// settlement (its lease expired, the process died) or was abandoned.
	ReasonMaxDelivery = "max delivery count exceeded"
	// ReasonTTL: the message's time to live passed on a queue with
	// DeadLetterOnExpire.
	ReasonTTL = "ttl expired"
)
