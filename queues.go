package mqlite

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/setting"
)

// Limits enforced on queue names and QueueOptions. MaxTTL bounds a
// message's TTL too.
const (
	MaxQueueNameLen  = 128
	MaxDeliveryLimit = 10_000
	MinLockDuration  = 100 * time.Millisecond
	MaxLockDuration  = 24 * time.Hour
	MaxDedupWindow   = 7 * 24 * time.Hour
	MaxTTL           = 100 * 365 * 24 * time.Hour
)

// Defaults of QueueOptions' zero-valued fields.
const (
	DefaultMaxDeliveryCount = 10
	DefaultLockDuration     = 30 * time.Second
	DefaultDedupWindow      = 10 * time.Minute
	DefaultDLQMaxAge        = 14 * 24 * time.Hour
	DefaultDLQMaxCount      = 100_000
	DefaultDLQMaxBytes      = 256 << 20
)

// Ordering is a queue's delivery order.
type Ordering int

const (
	// Standard queues hand messages out in sequence order to any number of
	// consumers at once; messages that carry a GroupID are still delivered
	// one at a time, in order, within their group.
	Standard Ordering = iota
	// FIFO queues treat every message as grouped: a message without a
	// GroupID belongs to the queue's default group, so the queue as a whole
	// hands out one message at a time, in order.
	FIFO
)

// String returns "standard" or "fifo".
func (o Ordering) String() string {
	switch o {
	case Standard:
		return "standard"
	case FIFO:
		return "fifo"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// DLQRetention bounds a queue's dead letters. The oldest dead letters beyond
// any bound are removed by the retention sweep.
type DLQRetention struct {
	// MaxAge is how long a dead letter is kept. Defaults to 14 days; -1
	// keeps them forever.
	MaxAge time.Duration
	// MaxCount is how many dead letters are kept. Defaults to 100,000; -1
	// means no bound.
	MaxCount int
	// MaxBytes bounds the bodies of the dead letters kept. Defaults to
	// 256 MiB; -1 means no bound.
	MaxBytes int64
}

// QueueOptions configures a queue. Zero values mean the documented defaults.
type QueueOptions struct {
	// MaxDeliveryCount is how many times a message is handed out before it
	// is dead-lettered. Defaults to 10; 1 to 10,000.
	MaxDeliveryCount int
	// LockDuration is the lease of a peek-lock delivery. Defaults to 30s;
	// 100ms to 24h.
	LockDuration time.Duration
	// DedupWindow is how long a MessageID (and, with DedupByBody, the body
	// of a message sent without one) is remembered to collapse resends.
	// Defaults to 10 minutes; at most 7 days; -1 turns de-duplication off.
	DedupWindow time.Duration
	// DedupByBody deduplicates messages sent without a MessageID by their
	// body (its SHA-256): inside DedupWindow, a second send of the same
	// body writes nothing and returns the first one's seq. Off by default:
	// without a MessageID every send is a new message, and only a
	// MessageID is remembered. A queue from a file made before this option
	// existed has it on, as it then behaved.
	DedupByBody bool
	// Ordering is Standard (the default) or FIFO.
	Ordering Ordering
	// DefaultTTL is the time to live of a message sent without one.
	// Defaults to none (0 or -1): messages live until consumed.
	DefaultTTL time.Duration
	// DeadLetterOnExpire dead-letters expired messages instead of removing
	// them.
	DeadLetterOnExpire bool
	// DLQ bounds the dead letters kept.
	DLQ DLQRetention
}

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

func validateQueueName(name string) error { return validateName(ErrInvalidQueueName, name) }

// validateName checks a queue or topic name; kind is the sentinel to report.
func validateName(kind error, name string) error {
	switch {
	case name == "":
		return invalidf(kind, "empty name")
	case len(name) > MaxQueueNameLen:
		return invalidf(kind, "%d bytes, at most %d", len(name), MaxQueueNameLen)
	case !queueNameRE.MatchString(name):
		return invalidf(kind, "%q: use letters, digits and . _ : - (starting with a letter or digit)", name)
	}
	return nil
}

// resolveQueue validates o and fills in defaults, returning the row to store.
func resolveQueue(name string, o QueueOptions) (driver.Queue, error) {
	if err := validateQueueName(name); err != nil {
		return driver.Queue{}, err
	}
	q := driver.Queue{Name: name, DeadLetterOnExpire: o.DeadLetterOnExpire, DedupByBody: o.DedupByBody}
	switch {
	case o.MaxDeliveryCount == 0:
		q.MaxDeliveryCount = DefaultMaxDeliveryCount
	case o.MaxDeliveryCount < 1 || o.MaxDeliveryCount > MaxDeliveryLimit:
		return q, invalidf(ErrInvalidMaxDelivery, "%d, want 1 to %d", o.MaxDeliveryCount, MaxDeliveryLimit)
	default:
		q.MaxDeliveryCount = int64(o.MaxDeliveryCount)
	}
	switch {
	case o.LockDuration == 0:
		q.LockDurationMS = DefaultLockDuration.Milliseconds()
	case o.LockDuration < MinLockDuration || o.LockDuration > MaxLockDuration:
		return q, invalidf(ErrInvalidLockDuration, "%v, want %v to %v", o.LockDuration, MinLockDuration, MaxLockDuration)
	default:
		q.LockDurationMS = o.LockDuration.Milliseconds()
	}
	window, err := setting.DefaultOrOff("DedupWindow", o.DedupWindow, DefaultDedupWindow, 0)
	if err != nil || window != 0 && (window < time.Millisecond || window > MaxDedupWindow) {
		return q, invalidf(ErrInvalidDedupWindow, "%v, want 1ms to %v, or -1 for off", o.DedupWindow, MaxDedupWindow)
	}
	q.DedupWindowMS = window.Milliseconds()
	switch {
	case o.DefaultTTL == 0 || o.DefaultTTL == -1:
	case o.DefaultTTL < time.Millisecond || o.DefaultTTL > MaxTTL:
		return q, invalidf(ErrInvalidTTL, "DefaultTTL %v, want 1ms to %v, or 0 for none", o.DefaultTTL, MaxTTL)
	default:
		q.DefaultTTLMS = o.DefaultTTL.Milliseconds()
	}
	switch o.Ordering {
	case Standard:
	case FIFO:
		q.FIFO = true
	default:
		return q, invalidf(ErrInvalidOrdering, "%v", o.Ordering)
	}
	if q.DLQMaxAgeMS, err = bound(int64(o.DLQ.MaxAge), int64(DefaultDLQMaxAge), "MaxAge"); err != nil {
		return q, err
	}
	if q.DLQMaxAgeMS > 0 {
		q.DLQMaxAgeMS = time.Duration(q.DLQMaxAgeMS).Milliseconds()
	}
	if q.DLQMaxCount, err = bound(int64(o.DLQ.MaxCount), DefaultDLQMaxCount, "MaxCount"); err != nil {
		return q, err
	}
	if q.DLQMaxBytes, err = bound(o.DLQ.MaxBytes, DefaultDLQMaxBytes, "MaxBytes"); err != nil {
		return q, err
	}
	return q, nil
}

// bound resolves one retention bound: 0 is def, -1 is unbounded (stored as
// 0), any other negative value is an error.
func bound(v, def int64, field string) (int64, error) {
	v, err := setting.DefaultOrOff("DLQ."+field, v, def, 0)
	if err != nil {
		return 0, invalidf(ErrInvalidRetention, "%v", err)
	}
	return v, nil
}

// queueOptions turns a stored row back into the options that produce it.
func queueOptions(q driver.Queue) QueueOptions {
	o := QueueOptions{
		MaxDeliveryCount:   int(q.MaxDeliveryCount),
		LockDuration:       time.Duration(q.LockDurationMS) * time.Millisecond,
		DedupWindow:        time.Duration(q.DedupWindowMS) * time.Millisecond,
		DefaultTTL:         time.Duration(q.DefaultTTLMS) * time.Millisecond,
		DeadLetterOnExpire: q.DeadLetterOnExpire,
		DedupByBody:        q.DedupByBody,
		DLQ: DLQRetention{
			MaxAge:   time.Duration(q.DLQMaxAgeMS) * time.Millisecond,
			MaxCount: int(q.DLQMaxCount),
			MaxBytes: q.DLQMaxBytes,
		},
	}
	if q.FIFO {
		o.Ordering = FIFO
	}
	if o.DedupWindow == 0 {
		o.DedupWindow = -1
	}
	unbounded := func(v *int64) {
		if *v == 0 {
			*v = -1
		}
	}
	age, count := int64(o.DLQ.MaxAge), int64(o.DLQ.MaxCount)
	unbounded(&age)
	unbounded(&count)
	unbounded(&o.DLQ.MaxBytes)
	o.DLQ.MaxAge, o.DLQ.MaxCount = time.Duration(age), int(count)
	return o
}

// QueueInfo describes a queue: its resolved options (defaults filled in) and
// when it was created and last changed.
type QueueInfo struct {
	Name      string
	Options   QueueOptions
	CreatedAt time.Time
	UpdatedAt time.Time
	// PausedAt is when the queue was paused (PauseQueue); zero while it
	// runs.
	PausedAt time.Time
}

// Paused reports whether the queue is paused.
func (q QueueInfo) Paused() bool { return !q.PausedAt.IsZero() }

func queueInfo(q driver.Queue) QueueInfo {
	return QueueInfo{Name: q.Name, Options: queueOptions(q),
		CreatedAt: fromMillis(q.CreatedAt), UpdatedAt: fromMillis(q.UpdatedAt), PausedAt: fromMillis(q.PausedAt)}
}

// CreateQueue creates the queue name with opts. A bad option is a typed
// error matching both ErrInvalidArgument and the field's sentinel; an
// existing name is ErrQueueExists. Nothing is written on error.
func (s *Store) CreateQueue(ctx context.Context, name string, opts QueueOptions) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	q, err := resolveQueue(name, opts)
	if err != nil {
		return err
	}
	defer s.queues.forget(name)
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.CreateQueue(ctx, tx, q, s.now()) })
}

// UpdateQueue replaces the options of an existing queue; zero values mean
// the defaults, as in CreateQueue. The new lease and delivery limits apply to
// the next claim. The ordering of a queue that holds messages cannot change
// (ErrInvalidOrdering).
func (s *Store) UpdateQueue(ctx context.Context, name string, opts QueueOptions) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	q, err := resolveQueue(name, opts)
	if err != nil {
		return err
	}
	defer s.queues.forget(name)
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.UpdateQueue(ctx, tx, q, s.now()) })
}

// DeleteQueue removes a queue and everything in it: messages in every
// state, dedup rows, receipts and attempts.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateQueueName(name); err != nil {
		return err
	}
	defer s.queues.forget(name)
	defer s.receivers.DropQueue(name)
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.DeleteQueue(ctx, tx, name) })
}

// GetQueue returns one queue, or ErrQueueNotFound.
func (s *Store) GetQueue(ctx context.Context, name string) (QueueInfo, error) {
	if err := s.ready(ctx); err != nil {
		return QueueInfo{}, err
	}
	if err := validateQueueName(name); err != nil {
		return QueueInfo{}, err
	}
	q, err := s.eng.GetQueue(ctx, s.db, name)
	if err != nil {
		return QueueInfo{}, err
	}
	return queueInfo(q), nil
}

// ListQueues returns every queue in name order.
func (s *Store) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	qs, err := s.eng.ListQueues(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		out[i] = queueInfo(q)
	}
	return out, nil
}

// PurgeOptions configures Purge.
type PurgeOptions struct {
	// State is the state of the messages to remove: StateActive,
	// StateScheduled, StateDeferred, StateDeadLettered or StateLocked.
	// Purging locked messages takes them from under their consumers, whose
	// settlements then fail with ErrLockLost. Required.
	State State
	// Seqs, when set, are the messages to remove: only those of them in
	// State go (the others are skipped), in one transaction; an operator
	// purges the dead letters it selected this way. Empty means every
	// message of the queue in State.
	Seqs []int64
}

// Purge removes every message of queue in opts.State and returns how many it
// removed. It deletes in batches of a few hundred, each its own transaction,
// so sends and receives go on between them; cancelling ctx stops it between
// batches (the count so far is returned with ctx's error). An unknown state
// is ErrInvalidArgument, an unknown queue ErrQueueNotFound.
func (s *Store) Purge(ctx context.Context, queue string, opts PurgeOptions) (int, error) {
	switch opts.State {
	case StateActive, StateScheduled, StateLocked, StateDeferred, StateDeadLettered:
	default:
		return 0, invalidf(ErrInvalidArgument, "purge state %q, want one of active, scheduled, locked, deferred, dead_lettered", opts.State)
	}
	if err := s.checkSeqs(ctx, queue, opts.Seqs); err != nil {
		return 0, err
	}
	if len(opts.Seqs) > 0 {
		var n int64
		err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.catchUp(ctx, tx, queue); err != nil {
				return err
			}
			var err error
			n, err = s.eng.PurgeSeqs(ctx, tx, queue, string(opts.State), opts.Seqs)
			return err
		})
		return int(n), err
	}
	var total int64
	for {
		var n int64
		err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.catchUp(ctx, tx, queue); err != nil {
				return err
			}
			var err error
			n, err = s.eng.PurgeBatch(ctx, tx, queue, string(opts.State))
			return err
		})
		total += n
		if err != nil {
			return int(total), err
		}
		if n < driver.SweepBatch {
			return int(total), nil
		}
	}
}

// QueueStats is a snapshot of one queue.
type QueueStats struct {
	Queue string
	// Messages per state.
	Active, Scheduled, Locked, Deferred, DeadLettered int64
	// Bytes is the sum of the body lengths of every message, dead letters
	// included; DeadLetterBytes is the dead letters' share.
	Bytes, DeadLetterBytes int64
	// OldestAge is how long ago (by the store's Clock) the oldest message
	// that is not dead-lettered was sent; 0 when there is none.
	OldestAge time.Duration
	// OldestDeadLetterAge is how long ago the oldest dead letter was
	// dead-lettered; 0 when there is none.
	OldestDeadLetterAge time.Duration
	// Counters are the queue's events since the store was opened; see
	// Store.Metrics. They are kept in memory, not read from the file.
	Counters QueueCounters
	// Receivers are the queue's live receivers (Store.Receivers), kept in
	// memory.
	Receivers []Receiver
}

// Total is the number of messages in the queue, dead letters included.
func (q QueueStats) Total() int64 {
	return q.Active + q.Scheduled + q.Locked + q.Deferred + q.DeadLettered
}

// Stats counts the messages of queue per state, with their bytes and the
// age of the oldest. It reads the queue's entries of the state indexes (no
// other queue's, no body), so its cost grows with the queue asked about, not
// with the file; on a large queue it still holds the store's connection for
// a while: it is for operators and dashboards, not for every request.
func (s *Store) Stats(ctx context.Context, queue string) (QueueStats, error) {
	if err := s.checkQueue(ctx, queue); err != nil {
		return QueueStats{}, err
	}
	var per map[string]driver.StateStats
	var now int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.catchUp(ctx, tx, queue); err != nil {
			return err
		}
		var err error
		per, err = s.eng.Stats(ctx, tx, queue)
		if err == nil {
			s.tally.Correct(queue, exactOf(per))
		}
		now = s.now()
		return err
	})
	if err != nil {
		return QueueStats{}, err
	}
	age := func(ms int64) time.Duration {
		if ms == 0 || ms > now {
			return 0
		}
		return time.Duration(now-ms) * time.Millisecond
	}
	st := QueueStats{Queue: queue, Counters: QueueCounters(s.tally.Counters(queue)), Receivers: receiversOf(s.listReceivers(), queue)}
	var oldest int64
	for state, v := range per {
		st.Bytes += v.Bytes
		switch State(state) {
		case StateActive:
			st.Active = v.Count
		case StateScheduled:
			st.Scheduled = v.Count
		case StateLocked:
			st.Locked = v.Count
		case StateDeferred:
			st.Deferred = v.Count
		case StateDeadLettered:
			st.DeadLettered, st.DeadLetterBytes = v.Count, v.Bytes
			st.OldestDeadLetterAge = age(v.OldestDead)
			continue
		}
		if oldest == 0 || (v.OldestEnq > 0 && v.OldestEnq < oldest) {
			oldest = v.OldestEnq
		}
	}
	st.OldestAge = age(oldest)
	return st, nil
}

// PauseQueue pauses the queue name, in the file, so that it holds for
// every consumer and across restarts: while it is paused, Receive claims
// nothing (a Receive with a Wait waits, as on an empty queue; a
// consumer.Loop and a relay idle without an error), while sends are still
// accepted and deliveries already out can still be settled and renewed.
// ReceiveDeferred, which asks for one message by its seq, is not paused.
// Pausing a paused queue changes nothing (QueueInfo.PausedAt keeps the
// first pause). An unknown queue is ErrQueueNotFound.
func (s *Store) PauseQueue(ctx context.Context, name string) error {
	return s.setPaused(ctx, name, true)
}

// ResumeQueue resumes a paused queue: the receives waiting on it claim at
// once. Resuming a running queue changes nothing. An unknown queue is
// ErrQueueNotFound.
func (s *Store) ResumeQueue(ctx context.Context, name string) error {
	return s.setPaused(ctx, name, false)
}

func (s *Store) setPaused(ctx context.Context, name string, pause bool) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateQueueName(name); err != nil {
		return err
	}
	defer s.queues.forget(name)
	var at int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if pause {
			at = s.now()
		}
		if err := s.eng.SetPaused(ctx, tx, name, at); err != nil {
			return err
		}
		// Before the commit, which wakes the receives waiting: the first
		// one woken must read the queue anew.
		s.queues.forget(name)
		if !pause {
			s.notify.Mark(name)
		}
		return nil
	})
	if err == nil {
		s.tally.Paused(name, pause)
	}
	return err
}

// catchUp brings the queue's rows to the store's "now" inside tx: due
// scheduled messages become active, lapsed leases end (dead-lettered on the
// last allowed delivery), exactly as the next claim would. The operator
// calls (Peek, Stats, Redrive, Purge) see and act on that state, not on one
// that waits for the next Receive or sweep. A store whose sessions cannot
// write (readOnly) reads the rows as they are: a due scheduled message
// still scheduled, a lapsed lease still locked, until a store that writes
// catches the queue up.
func (s *Store) catchUp(ctx context.Context, tx *sql.Tx, queue string) error {
	q, err := s.queues.get(ctx, tx, queue)
	if err != nil || s.readOnly {
		return err
	}
	return s.eng.MakeClaimable(ctx, tx, q, s.now())
}

// checkSeqs checks an operator call's queue (checkQueue) and its listed
// sequence numbers.
func (s *Store) checkSeqs(ctx context.Context, queue string, seqs []int64) error {
	if err := s.checkQueue(ctx, queue); err != nil {
		return err
	}
	for _, seq := range seqs {
		if seq <= 0 {
			return invalidf(ErrInvalidArgument, "seq %d", seq)
		}
	}
	return nil
}

// checkQueue validates queue and checks that it exists.
func (s *Store) checkQueue(ctx context.Context, queue string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateQueueName(queue); err != nil {
		return err
	}
	_, err := s.queues.get(ctx, s.db, queue)
	return err
}
