// Package wire is the broker's HTTP/JSON vocabulary, shared by the broker
// (broker/) and its Go client (client/): the request and response bodies,
// their conversions to and from the root package's types, and the table that
// maps each root sentinel error to a stable code, a reason and an HTTP status.
//
// Durations travel as integer milliseconds (fields ending in _ms), the
// store's own resolution; -1 keeps its meaning of "off" or "no bound".
// Times travel as RFC 3339 strings and bodies as base64 (encoding/json's
// []byte). docs/api-reference-broker.md documents every body.
package wire

import (
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// DurMS encodes d as milliseconds; -1 (the "off" value) stays -1.
func DurMS(d time.Duration) int64 {
	if d == -1 {
		return -1
	}
	return d.Milliseconds()
}

// MSDur decodes milliseconds: -1 stays -1, the "off" value of every
// duration option; any other negative value stays negative, for the store
// to refuse (a broker refuses bad input, it never rewrites it into a value
// that means something).
func MSDur(ms int64) time.Duration {
	const most = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case ms == -1:
		return -1
	case ms < -most:
		return time.Duration(-1 << 63)
	}
	if ms > most {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

// SendMessage is a message to send.
type SendMessage struct {
	Body       []byte            `json:"body"`
	MessageID  string            `json:"message_id,omitempty"`
	GroupID    string            `json:"group_id,omitempty"`
	Subject    string            `json:"subject,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	DeliverAt  time.Time         `json:"deliver_at,omitzero"`
	TTLMS      int64             `json:"ttl_ms,omitempty"`
}

// FromOutbox encodes an outbox.Message.
func FromOutbox(m outbox.Message) SendMessage {
	return SendMessage{Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID, Subject: m.Subject,
		Properties: m.Properties, DeliverAt: m.DeliverAt, TTLMS: DurMS(m.TTL)}
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
		Properties: m.Properties, DeliverAt: m.DeliverAt, TTL: ttl}
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
}

// FromMessage encodes m.
func FromMessage(m mqlite.Message) ReceivedMessage {
	return ReceivedMessage{Queue: m.Queue, Seq: m.Seq, Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID,
		Subject: m.Subject, Properties: m.Properties, DeliveryCount: m.DeliveryCount,
		EnqueuedAt: m.EnqueuedAt, ExpiresAt: m.ExpiresAt, LockToken: m.LockToken, LockedUntil: m.LockedUntil,
		State: string(m.State), VisibleAt: m.VisibleAt, DeadLetterReason: m.DeadLetterReason,
		DeadLetterDescription: m.DeadLetterDescription, DeadLetteredAt: m.DeadLetteredAt, LastError: m.LastError}
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
		DeadLetterDescription: m.DeadLetterDescription, DeadLetteredAt: m.DeadLetteredAt, LastError: m.LastError}
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

// LockRequest is the body of complete, defer and renew, and one lock of the
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

// RedriveRequest is the body of redrive; no seqs means every dead letter.
type RedriveRequest struct {
	Seqs []int64 `json:"seqs,omitempty"`
}

// DeliverNowRequest is the body of deliver-now; no seqs means every
// scheduled message of the queue.
type DeliverNowRequest struct {
	Seqs []int64 `json:"seqs,omitempty"`
}

// PurgeRequest is the body of purge; seqs, when set, are the messages to
// remove (those of them in state).
type PurgeRequest struct {
	State string  `json:"state"`
	Seqs  []int64 `json:"seqs,omitempty"`
}

// CountResponse is the response of redrive, deliver-now and purge.
type CountResponse struct {
	Count int `json:"count"`
}

// DLQ is DLQRetention on the wire.
type DLQ struct {
	MaxAgeMS int64 `json:"max_age_ms,omitempty"`
	MaxCount int   `json:"max_count,omitempty"`
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// QueueOptions is mqlite.QueueOptions on the wire; zero values mean the
// defaults, as in Go.
type QueueOptions struct {
	MaxDeliveryCount   int    `json:"max_delivery_count,omitempty"`
	LockDurationMS     int64  `json:"lock_duration_ms,omitempty"`
	DedupWindowMS      int64  `json:"dedup_window_ms,omitempty"`
	Ordering           string `json:"ordering,omitempty"`
	DefaultTTLMS       int64  `json:"default_ttl_ms,omitempty"`
	DeadLetterOnExpire bool   `json:"dead_letter_on_expire,omitempty"`
	DedupByBody        bool   `json:"dedup_by_body,omitempty"`
	DLQ                DLQ    `json:"dlq,omitzero"`
}

func optDur(ms int64) time.Duration {
	if ms == 0 {
		return 0
	}
	return MSDur(ms)
}

// FromQueueOptions encodes o.
func FromQueueOptions(o mqlite.QueueOptions) QueueOptions {
	return QueueOptions{MaxDeliveryCount: o.MaxDeliveryCount, LockDurationMS: DurMS(o.LockDuration),
		DedupWindowMS: DurMS(o.DedupWindow), Ordering: o.Ordering.String(), DefaultTTLMS: DurMS(o.DefaultTTL),
		DeadLetterOnExpire: o.DeadLetterOnExpire, DedupByBody: o.DedupByBody,
		DLQ: DLQ{MaxAgeMS: DurMS(o.DLQ.MaxAge), MaxCount: o.DLQ.MaxCount, MaxBytes: o.DLQ.MaxBytes}}
}

// Options decodes o; an unknown ordering is mqlite.ErrInvalidOrdering.
func (o QueueOptions) Options() (mqlite.QueueOptions, error) {
	out := mqlite.QueueOptions{MaxDeliveryCount: o.MaxDeliveryCount, LockDuration: optDur(o.LockDurationMS),
		DedupWindow: optDur(o.DedupWindowMS), DefaultTTL: optDur(o.DefaultTTLMS),
		DeadLetterOnExpire: o.DeadLetterOnExpire, DedupByBody: o.DedupByBody,
		DLQ: mqlite.DLQRetention{MaxAge: optDur(o.DLQ.MaxAgeMS), MaxCount: o.DLQ.MaxCount, MaxBytes: o.DLQ.MaxBytes}}
	switch o.Ordering {
	case "", "standard":
	case "fifo":
		out.Ordering = mqlite.FIFO
	default:
		return out, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidOrdering, Detail: "unknown ordering " + quote(o.Ordering)}
	}
	return out, nil
}

// CreateQueueRequest is the body of a queue creation.
type CreateQueueRequest struct {
	Name    string       `json:"name"`
	Options QueueOptions `json:"options,omitzero"`
}

// UpdateQueueRequest is the body of a queue update: the new options,
// replacing the old ones whole.
type UpdateQueueRequest struct {
	Options QueueOptions `json:"options"`
}

// QueueInfo is mqlite.QueueInfo on the wire.
type QueueInfo struct {
	Name      string       `json:"name"`
	Options   QueueOptions `json:"options"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	// PausedAt is when the queue was paused; absent while it runs.
	PausedAt time.Time `json:"paused_at,omitzero"`
}

// FromQueueInfo encodes q.
func FromQueueInfo(q mqlite.QueueInfo) QueueInfo {
	return QueueInfo{Name: q.Name, Options: FromQueueOptions(q.Options), CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt,
		PausedAt: q.PausedAt}
}

// Info decodes q.
func (q QueueInfo) Info() (mqlite.QueueInfo, error) {
	o, err := q.Options.Options()
	return mqlite.QueueInfo{Name: q.Name, Options: o, CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt, PausedAt: q.PausedAt}, err
}

// QueuesResponse is the response of the queue listing.
type QueuesResponse struct {
	Queues []QueueInfo `json:"queues"`
}

// Stats is mqlite.QueueStats on the wire.
type Stats struct {
	Queue                 string `json:"queue"`
	Active                int64  `json:"active"`
	Scheduled             int64  `json:"scheduled"`
	Locked                int64  `json:"locked"`
	Deferred              int64  `json:"deferred"`
	DeadLettered          int64  `json:"dead_lettered"`
	Bytes                 int64  `json:"bytes"`
	DeadLetterBytes       int64  `json:"dead_letter_bytes"`
	OldestAgeMS           int64  `json:"oldest_age_ms"`
	OldestDeadLetterAgeMS int64  `json:"oldest_dead_letter_age_ms"`
	// Counters are the queue's events since the broker opened the store.
	Counters Counters `json:"counters"`
	// Receivers are the queue's live receivers, at most MaxReceivers of
	// them (in key, address and name order); ReceiversTotal counts all.
	Receivers      []Receiver `json:"receivers"`
	ReceiversTotal int        `json:"receivers_total"`
}

// MaxReceivers bounds the receivers of one Stats answer.
const MaxReceivers = 100

// Receiver is mqlite.Receiver on the wire (its queue is the answer's).
type Receiver struct {
	Name     string    `json:"name"`
	KeyID    string    `json:"key_id,omitempty"`
	Addr     string    `json:"addr,omitempty"`
	Waiting  int       `json:"waiting"`
	Locks    int       `json:"locks"`
	LastSeen time.Time `json:"last_seen"`
}

// Counters is mqlite.QueueCounters on the wire. The dashboard reads these
// names: keep them.
type Counters struct {
	Sent         int64 `json:"sent"`
	Received     int64 `json:"received"`
	Completed    int64 `json:"completed"`
	Abandoned    int64 `json:"abandoned"`
	Rejected     int64 `json:"rejected"`
	DeadLettered int64 `json:"dead_lettered"`
	LockLost     int64 `json:"lock_lost"`
	Redelivered  int64 `json:"redelivered"`
}

// QueueCounts is one queue's entry of GET /v1/counts: its messages per
// state, bytes and counters, as Store.Metrics keeps them (nothing read
// from the file), and the ages of Store.Ages (two index seeks).
type QueueCounts struct {
	Queue                 string   `json:"queue"`
	Active                int64    `json:"active"`
	Scheduled             int64    `json:"scheduled"`
	Locked                int64    `json:"locked"`
	Deferred              int64    `json:"deferred"`
	DeadLettered          int64    `json:"dead_lettered"`
	Bytes                 int64    `json:"bytes"`
	OldestAgeMS           int64    `json:"oldest_age_ms"`
	OldestDeadLetterAgeMS int64    `json:"oldest_dead_letter_age_ms"`
	Paused                bool     `json:"paused"`
	Consumers             int64    `json:"consumers"`
	Waiting               int64    `json:"waiting"`
	Locks                 int64    `json:"locks"`
	Counters              Counters `json:"counters"`
}

// CountsResponse is the response of GET /v1/counts.
type CountsResponse struct {
	Queues []QueueCounts `json:"queues"`
}

// FromMetrics encodes the counts of m.
func FromMetrics(m mqlite.QueueMetrics) QueueCounts {
	return QueueCounts{Queue: m.Queue, Active: m.Active, Scheduled: m.Scheduled, Locked: m.Locked,
		Deferred: m.Deferred, DeadLettered: m.DeadLettered, Bytes: m.Bytes, Paused: m.Paused, Consumers: m.Consumers,
		Waiting: m.Waiting, Locks: m.Locks, Counters: Counters(m.Counters)}
}

// WithAges sets the ages of c from a.
func (c QueueCounts) WithAges(a mqlite.QueueAges) QueueCounts {
	c.OldestAgeMS, c.OldestDeadLetterAgeMS = a.OldestActive.Milliseconds(), a.OldestDeadLetter.Milliseconds()
	return c
}

// FromStats encodes s.
func FromStats(s mqlite.QueueStats) Stats {
	out := Stats{Queue: s.Queue, Active: s.Active, Scheduled: s.Scheduled, Locked: s.Locked, Deferred: s.Deferred,
		DeadLettered: s.DeadLettered, Bytes: s.Bytes, DeadLetterBytes: s.DeadLetterBytes,
		OldestAgeMS: s.OldestAge.Milliseconds(), OldestDeadLetterAgeMS: s.OldestDeadLetterAge.Milliseconds(),
		Counters: Counters(s.Counters), Receivers: []Receiver{}, ReceiversTotal: len(s.Receivers)}
	for i, r := range s.Receivers {
		if i == MaxReceivers {
			break
		}
		out.Receivers = append(out.Receivers, Receiver{Name: r.Name, KeyID: r.KeyID, Addr: r.Addr,
			Waiting: r.Waiting, Locks: r.Locks, LastSeen: r.LastSeen})
	}
	return out
}

// QueueStats decodes s.
func (s Stats) QueueStats() mqlite.QueueStats {
	return mqlite.QueueStats{Queue: s.Queue, Active: s.Active, Scheduled: s.Scheduled, Locked: s.Locked,
		Deferred: s.Deferred, DeadLettered: s.DeadLettered, Bytes: s.Bytes, DeadLetterBytes: s.DeadLetterBytes,
		OldestAge: time.Duration(s.OldestAgeMS) * time.Millisecond, OldestDeadLetterAge: time.Duration(s.OldestDeadLetterAgeMS) * time.Millisecond,
		Counters: mqlite.QueueCounters(s.Counters), Receivers: s.receivers()}
}

// receivers decodes the receivers of s; nil for none.
func (s Stats) receivers() []mqlite.Receiver {
	var out []mqlite.Receiver
	for _, r := range s.Receivers {
		out = append(out, mqlite.Receiver{Queue: s.Queue, ReceiverTag: mqlite.ReceiverTag{Name: r.Name, KeyID: r.KeyID, Addr: r.Addr},
			Waiting: r.Waiting, Locks: r.Locks, LastSeen: r.LastSeen})
	}
	return out
}

// CreateTopicRequest is the body of a topic creation.
type CreateTopicRequest struct {
	Name string `json:"name"`
}

// CreateSubscriptionRequest is the body of a subscription creation: the
// subscription's queue, its filter and the queue's options.
type CreateSubscriptionRequest struct {
	Queue   string        `json:"queue"`
	Filter  mqlite.Filter `json:"filter,omitzero"`
	Options QueueOptions  `json:"options,omitzero"`
}

// UpdateSubscriptionRequest is the body of a subscription update: the new
// filter.
type UpdateSubscriptionRequest struct {
	Filter mqlite.Filter `json:"filter"`
}

// Subscription is mqlite.SubscriptionInfo on the wire.
type Subscription struct {
	Topic     string        `json:"topic"`
	Queue     string        `json:"queue"`
	Filter    mqlite.Filter `json:"filter"`
	CreatedAt time.Time     `json:"created_at"`
}

// Topic is mqlite.TopicInfo on the wire.
type Topic struct {
	Name          string         `json:"name"`
	CreatedAt     time.Time      `json:"created_at"`
	Subscriptions []Subscription `json:"subscriptions"`
}

// FromTopic encodes t.
func FromTopic(t mqlite.TopicInfo) Topic {
	out := Topic{Name: t.Name, CreatedAt: t.CreatedAt, Subscriptions: make([]Subscription, len(t.Subscriptions))}
	for i, s := range t.Subscriptions {
		out.Subscriptions[i] = Subscription{Topic: s.Topic, Queue: s.Queue, Filter: s.Filter, CreatedAt: s.CreatedAt}
	}
	return out
}

// TopicInfo decodes t.
func (t Topic) TopicInfo() mqlite.TopicInfo {
	out := mqlite.TopicInfo{Name: t.Name, CreatedAt: t.CreatedAt}
	for _, s := range t.Subscriptions {
		out.Subscriptions = append(out.Subscriptions, mqlite.SubscriptionInfo{Topic: s.Topic, Queue: s.Queue, Filter: s.Filter, CreatedAt: s.CreatedAt})
	}
	return out
}

// TopicsResponse is the response of the topic listing.
type TopicsResponse struct {
	Topics []Topic `json:"topics"`
}

// CreateKeyRequest is the body of an access key creation.
type CreateKeyRequest struct {
	Role   string   `json:"role"`
	Queues []string `json:"queues"`
}

// Key describes an access key; never its secret.
type Key struct {
	ID        string    `json:"id"`
	Role      string    `json:"role"`
	Queues    []string  `json:"queues"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// CreateKeyResponse is the response of a key creation: the only time the
// secret is shown.
type CreateKeyResponse struct {
	Key    Key    `json:"key"`
	Secret string `json:"secret"`
}

// KeysResponse is the response of the key listing.
type KeysResponse struct {
	Keys []Key `json:"keys"`
}

// BackupRequest is the body of a backup, and its response: the name of a
// file to create in the broker's backup folder (a plain name, not a path).
type BackupRequest struct {
	Path string `json:"path"`
}

// Health is the response of /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
}

// Quote quotes s for an error message, cut after 64 bytes.
func Quote(s string) string { return quote(s) }

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}

// ClientHeader names the client instance that sends a request (the Go
// client sets it to a random name per Client), so that the broker counts
// two processes of one key and host as two receivers.
const ClientHeader = "Mqlite-Client"

// MaxClientNameLen bounds the value of ClientHeader.
const MaxClientNameLen = 64

// ValidClientName reports whether name is a ClientHeader value the broker
// takes: empty (none sent), or 1 to MaxClientNameLen ASCII letters,
// digits, '-', '_' or '.'.
func ValidClientName(name string) bool {
	if len(name) > MaxClientNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// FindResponse is the response of find: the page's matches, where the next
// page starts (0: the queue is done) and how many messages it examined.
type FindResponse struct {
	Messages []ReceivedMessage `json:"messages"`
	NextSeq  int64             `json:"next_seq"`
	Scanned  int               `json:"scanned"`
}
