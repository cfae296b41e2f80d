package wire

import (
	"time"

	"github.com/mqlite/mqlite"
)

// PurgeRequest is the body of purge; seqs, when set, are the messages to
// remove (those of them in state).
type PurgeRequest struct {
	State string  `json:"state"`
	Seqs  []int64 `json:"seqs,omitempty"`
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
