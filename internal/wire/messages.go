package wire

import (
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// SendMessage is a message to send.
type SendMessage struct {
	Body       []byte            `json:"body"`
	MessageID  string            `json:"message_id,omitempty"`
	GroupID    string            `json:"group_id,omitempty"`
	Subject    string            `json:"subject,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	DeliverAt  time.Time         `json:"deliver_at,omitzero"`
	TTLMS      int64             `json:"ttl_ms,omitempty"`
	Priority   int               `json:"priority,omitempty"`
}

// FromOutbox encodes an outbox.Message.
func FromOutbox(m outbox.Message) SendMessage {
	return SendMessage{Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID, Subject: m.Subject,
		Properties: m.Properties, DeliverAt: m.DeliverAt, TTLMS: DurMS(m.TTL), Priority: m.Priority}
}

// Outbox decodes the message for outbox.SendOne. A missing body is an
// empty one.
func (m SendMessage) Outbox() outbox.Message {
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	var ttl time.Duration
	if m.TTLMS != 0 {
		ttl = MSDur(m.TTLMS)
	}
	return outbox.Message{Body: body, MessageID: m.MessageID, GroupID: m.GroupID, Subject: m.Subject,
		Properties: m.Properties, DeliverAt: m.DeliverAt, TTL: ttl, Priority: m.Priority}
}

// SendBatchRequest is the body of a batched send.
type SendBatchRequest struct {
	Messages []SendMessage `json:"messages"`
}

// Copy is one copy a send left in one queue (a topic's subscription, or the
// queue itself).
type Copy struct {
	Queue     string `json:"queue"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     *Error `json:"error,omitempty"`
}

// SendResult is the outcome of one message: the response of a single send
// and each slot of a batched one.
type SendResult struct {
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     *Error `json:"error,omitempty"`
	Copies    []Copy `json:"copies"`
}

// FromResult encodes an outbox.Result.
func FromResult(r outbox.Result) SendResult {
	out := SendResult{Seq: r.Seq, Duplicate: r.Duplicate, Error: ErrorOf(r.Err), Copies: make([]Copy, len(r.Copies))}
	for i, c := range r.Copies {
		out.Copies[i] = Copy{Queue: c.Queue, Seq: c.Seq, Duplicate: c.Duplicate, Error: ErrorOf(c.Err)}
	}
	return out
}

// Result decodes the slot back into an outbox.Result whose errors match the
// root sentinels.
func (r SendResult) Result() outbox.Result {
	out := outbox.Result{Seq: r.Seq, Duplicate: r.Duplicate, Err: r.Error.Err()}
	if len(r.Copies) > 0 {
		out.Copies = make([]outbox.Copy, len(r.Copies))
		for i, c := range r.Copies {
			out.Copies[i] = outbox.Copy{Queue: c.Queue, Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Error.Err()}
		}
	}
	return out
}

// SendBatchResponse is the response of a batched send: one result per
// message, in order.
type SendBatchResponse struct {
	Results []SendResult `json:"results"`
}

// Receive modes on the wire.
const (
	ModePeekLock         = "peek_lock"
	ModeReceiveAndDelete = "receive_and_delete"
)

// ReceiveRequest is the body of a receive.
type ReceiveRequest struct {
	Max       int    `json:"max,omitempty"`
	WaitMS    int64  `json:"wait_ms,omitempty"`
	AttemptID string `json:"attempt_id,omitempty"`
	Mode      string `json:"mode,omitempty"`
	MaxBytes  int64  `json:"max_bytes,omitempty"`
}

// FromReceiveOptions encodes opts.
func FromReceiveOptions(opts mqlite.ReceiveOptions) ReceiveRequest {
	r := ReceiveRequest{Max: opts.Max, WaitMS: opts.Wait.Milliseconds(), AttemptID: opts.AttemptID, MaxBytes: opts.MaxBytes}
	if opts.Wait < 0 {
		r.WaitMS = -1
	}
	if opts.Wait > 0 && r.WaitMS == 0 {
		r.WaitMS = 1
	}
	if opts.Mode == mqlite.ReceiveAndDelete {
		r.Mode = ModeReceiveAndDelete
	} else if opts.Mode != mqlite.PeekLock {
		r.Mode = "unknown"
	}
	return r
}

// Options decodes the request; an unknown mode is ErrInvalidArgument.
func (r ReceiveRequest) Options() (mqlite.ReceiveOptions, error) {
	opts := mqlite.ReceiveOptions{Max: r.Max, AttemptID: r.AttemptID, MaxBytes: r.MaxBytes}
	if r.WaitMS != 0 {
		opts.Wait = MSDur(r.WaitMS)
	}
	switch r.Mode {
	case "", ModePeekLock:
	case ModeReceiveAndDelete:
		opts.Mode = mqlite.ReceiveAndDelete
	default:
		return opts, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "unknown receive mode " + quote(r.Mode)}
	}
	return opts, nil
}

// ReceivedMessage is a message as received or peeked.
type ReceivedMessage struct {
	Queue                 string            `json:"queue"`
	Seq                   int64             `json:"seq"`
	Body                  []byte            `json:"body"`
	MessageID             string            `json:"message_id,omitempty"`
	GroupID               string            `json:"group_id,omitempty"`
	Subject               string            `json:"subject,omitempty"`
	Properties            map[string]string `json:"properties,omitempty"`
	DeliveryCount         int               `json:"delivery_count"`
	EnqueuedAt            time.Time         `json:"enqueued_at"`
	ExpiresAt             time.Time         `json:"expires_at,omitzero"`
	LockToken             string            `json:"lock_token,omitempty"`
	LockedUntil           time.Time         `json:"locked_until,omitzero"`
	State                 string            `json:"state,omitempty"`
	VisibleAt             time.Time         `json:"visible_at,omitzero"`
	DeadLetterReason      string            `json:"dead_letter_reason,omitempty"`
	DeadLetterDescription string            `json:"dead_letter_description,omitempty"`
	DeadLetteredAt        time.Time         `json:"dead_lettered_at,omitzero"`
	LastError             string            `json:"last_error,omitempty"`
	Priority              int               `json:"priority,omitempty"`
	// Attempts is the history of the message's failed deliveries
	// (mqlite.Message.Attempts), oldest first; absent for none.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Attempt is one failed delivery of a message (mqlite.Attempt).
type Attempt struct {
	At     time.Time `json:"at"`
	Error  string    `json:"error"`
	Worker string    `json:"worker,omitempty"`
}

// fromAttempts encodes a history; nil for none.
func fromAttempts(as []mqlite.Attempt) []Attempt {
	var out []Attempt
	for _, a := range as {
		out = append(out, Attempt{At: a.At, Error: a.Error, Worker: a.Worker})
	}
	return out
}

// toAttempts decodes a history; nil for none.
func toAttempts(as []Attempt) []mqlite.Attempt {
	var out []mqlite.Attempt
	for _, a := range as {
		out = append(out, mqlite.Attempt{At: a.At, Error: a.Error, Worker: a.Worker})
	}
	return out
}

// FromMessage encodes m.
func FromMessage(m mqlite.Message) ReceivedMessage {
	return ReceivedMessage{Queue: m.Queue, Seq: m.Seq, Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID,
		Subject: m.Subject, Properties: m.Properties, DeliveryCount: m.DeliveryCount,
		EnqueuedAt: m.EnqueuedAt, ExpiresAt: m.ExpiresAt, LockToken: m.LockToken, LockedUntil: m.LockedUntil,
		State: string(m.State), VisibleAt: m.VisibleAt, DeadLetterReason: m.DeadLetterReason,
		DeadLetterDescription: m.DeadLetterDescription, DeadLetteredAt: m.DeadLetteredAt, LastError: m.LastError,
		Priority: m.Priority, Attempts: fromAttempts(m.Attempts)}
}

// Message decodes m.
func (m ReceivedMessage) Message() mqlite.Message {
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	return mqlite.Message{Queue: m.Queue, Seq: m.Seq, Body: body, MessageID: m.MessageID, GroupID: m.GroupID,
		Subject: m.Subject, Properties: m.Properties, DeliveryCount: m.DeliveryCount,
		EnqueuedAt: m.EnqueuedAt, ExpiresAt: m.ExpiresAt, LockToken: m.LockToken, LockedUntil: m.LockedUntil,
		State: mqlite.State(m.State), VisibleAt: m.VisibleAt, DeadLetterReason: m.DeadLetterReason,
		DeadLetterDescription: m.DeadLetterDescription, DeadLetteredAt: m.DeadLetteredAt, LastError: m.LastError,
		Priority: m.Priority, Attempts: toAttempts(m.Attempts)}
}

// FromMessages encodes msgs; never nil, so the JSON is [] and not null.
func FromMessages(msgs []mqlite.Message) []ReceivedMessage {
	out := make([]ReceivedMessage, len(msgs))
	for i, m := range msgs {
		out[i] = FromMessage(m)
	}
	return out
}

// Messages decodes msgs.
func Messages(msgs []ReceivedMessage) []mqlite.Message {
	out := make([]mqlite.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.Message()
	}
	return out
}

// MessagesResponse is the response of receive, peek and the dead-letter
// listing.
type MessagesResponse struct {
	Messages []ReceivedMessage `json:"messages"`
}

// MessageResponse is the response of receive-deferred.
type MessageResponse struct {
	Message ReceivedMessage `json:"message"`
}

// LockRequest is the body of complete, release, defer and renew, and one lock of the
// batched calls: the delivery's sequence number and fencing token (the queue
// is in the path).
type LockRequest struct {
	Seq   int64  `json:"seq"`
	Token string `json:"token"`
}

// Lock decodes the lock of queue.
func (r LockRequest) Lock(queue string) mqlite.Lock {
	return mqlite.Lock{Queue: queue, Seq: r.Seq, Token: r.Token}
}

// LocksRequest is the body of complete-batch and renew-batch.
type LocksRequest struct {
	Locks []LockRequest `json:"locks"`
}

// AbandonRequest is the body of abandon.
type AbandonRequest struct {
	Seq     int64  `json:"seq"`
	Token   string `json:"token"`
	DelayMS int64  `json:"delay_ms,omitempty"`
	// Reason, when not empty, is kept with the message as its last error
	// (mqlite.Store.AbandonWithReason).
	Reason string `json:"reason,omitempty"`
}

// RejectRequest is the body of reject.
type RejectRequest struct {
	Seq         int64  `json:"seq"`
	Token       string `json:"token"`
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
}

// SeqRequest is the body of receive-deferred.
type SeqRequest struct {
	Seq int64 `json:"seq"`
}

// ResultsResponse is the response of complete-batch: one result per lock.
type ResultsResponse struct {
	Results []ItemResult `json:"results"`
}

// CompleteReceiveRequest is the body of complete-receive: the deliveries
// to complete (of the path's queue) and the receive that follows them in
// the same commit.
type CompleteReceiveRequest struct {
	Complete []LockRequest  `json:"complete,omitempty"`
	Receive  ReceiveRequest `json:"receive"`
}

// CompleteReceiveResponse is the response of complete-receive: one result
// per lock completed, in order, and the messages claimed.
type CompleteReceiveResponse struct {
	Results  []ItemResult      `json:"results"`
	Messages []ReceivedMessage `json:"messages"`
}

// ItemResult is one lock's outcome in a batch: no error, or its error.
type ItemResult struct {
	Error       *Error    `json:"error,omitempty"`
	LockedUntil time.Time `json:"locked_until,omitzero"`
}

// RenewResponse is the response of renew.
type RenewResponse struct {
	LockedUntil time.Time `json:"locked_until"`
}

// DeliverNowRequest is the body of deliver-now; no seqs means every
// scheduled message of the queue.
type DeliverNowRequest struct {
	Seqs []int64 `json:"seqs,omitempty"`
}

// CountResponse is the response of redrive, deliver-now and purge.
type CountResponse struct {
	Count int `json:"count"`
}
