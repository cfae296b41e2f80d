package mqlite

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/errs"
)

// Defaults applied to zero-valued fields.
const (
	DefaultBusyTimeout      = 5 * time.Second
	DefaultMaxMessageBytes  = 1 << 20
	DefaultMaxDeliveryCount = 10
	DefaultLockDuration     = 30 * time.Second
	DefaultDedupWindow      = 10 * time.Minute
	DefaultDLQMaxAge        = 14 * 24 * time.Hour
	DefaultDLQMaxCount      = 100_000
	DefaultDLQMaxBytes      = 256 << 20
)

// Limits enforced on QueueOptions and messages.
const (
	MaxQueueNameLen     = 128
	MaxMessageIDLen     = 256
	MaxDeliveryLimit    = 10_000
	MinLockDuration     = 100 * time.Millisecond
	MaxLockDuration     = 24 * time.Hour
	MaxDedupWindow      = 7 * 24 * time.Hour
	MaxTTL              = 100 * 365 * 24 * time.Hour
	maxMessageBytesHard = 256 << 20
)

// SyncMode is SQLite's durability point for the store's file.
type SyncMode int

const (
	// SyncNormal (the default) makes a commit durable at the next WAL
	// checkpoint: a power cut can lose the last commits, a process crash
	// cannot.
	SyncNormal SyncMode = iota
	// SyncFull fsyncs the WAL at every commit.
	SyncFull
)

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Sync is the durability point. Defaults to SyncNormal, or to SyncFull
	// when the environment variable MQLITE_SYNC is "full".
	Sync SyncMode
	// BusyTimeout is how long a statement waits for a lock held by a
	// foreign connection (a backup tool, the sqlite3 shell). Defaults to 5s.
	BusyTimeout time.Duration
	// MaxMessageBytes is the largest body a message may carry. Defaults to
	// 1 MiB; at most 256 MiB.
	MaxMessageBytes int
	// Clock is the source of every timestamp. Defaults to SystemClock.
	Clock Clock
	// Logger receives the store's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger

	// The background loops: each runs one sweep on the store's connection
	// every interval, with "now" read from Clock. A sweep that finds nothing
	// to do writes nothing. -1 turns a loop off (the sweep then happens only
	// where a Receive does it inline, or not at all); see docs/operations.md.

	// ReaperInterval is how often expired leases of every queue go back to
	// active, or to the dead letters after the last allowed delivery.
	// Defaults to 1s.
	ReaperInterval time.Duration
	// SchedulerInterval is how often due scheduled messages (DeliverAt,
	// Abandon with a delay) become active. Defaults to 1s.
	SchedulerInterval time.Duration
	// TTLInterval is how often messages past their time to live are removed,
	// or dead-lettered on queues with DeadLetterOnExpire. Defaults to 5s.
	TTLInterval time.Duration
	// JanitorInterval is how often expired settlement receipts, receive
	// attempts and dedup keys are deleted. Defaults to 1m.
	JanitorInterval time.Duration
	// RetentionInterval is how often each queue's dead letters are cut back
	// to its DLQRetention bounds. Defaults to 1m.
	RetentionInterval time.Duration
}

// Default intervals of the background loops.
const (
	DefaultReaperInterval    = time.Second
	DefaultSchedulerInterval = time.Second
	DefaultTTLInterval       = 5 * time.Second
	DefaultJanitorInterval   = time.Minute
	DefaultRetentionInterval = time.Minute
)

// interval resolves one loop interval: 0 is def, -1 is off (0), any other
// negative value is an error.
func interval(v *time.Duration, def time.Duration, field string) error {
	switch {
	case *v == 0:
		*v = def
	case *v == -1:
		*v = 0
	case *v < 0:
		return errs.Newf(errs.ErrInvalidArgument, fmt.Sprintf("%s %v, want a positive interval, 0 for the default or -1 for off", field, *v))
	}
	return nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Sync == SyncNormal && strings.EqualFold(os.Getenv("MQLITE_SYNC"), "full") {
		o.Sync = SyncFull
	}
	if o.Sync != SyncNormal && o.Sync != SyncFull {
		return o, errs.Newf(errs.ErrInvalidArgument, fmt.Sprintf("unknown SyncMode %d", o.Sync))
	}
	if o.BusyTimeout < 0 {
		return o, errs.Newf(errs.ErrInvalidArgument, "negative BusyTimeout")
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.MaxMessageBytes < 0 || o.MaxMessageBytes > maxMessageBytesHard {
		return o, errs.Newf(errs.ErrInvalidArgument, fmt.Sprintf("MaxMessageBytes %d out of range", o.MaxMessageBytes))
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for _, iv := range []struct {
		v     *time.Duration
		def   time.Duration
		field string
	}{
		{&o.ReaperInterval, DefaultReaperInterval, "ReaperInterval"},
		{&o.SchedulerInterval, DefaultSchedulerInterval, "SchedulerInterval"},
		{&o.TTLInterval, DefaultTTLInterval, "TTLInterval"},
		{&o.JanitorInterval, DefaultJanitorInterval, "JanitorInterval"},
		{&o.RetentionInterval, DefaultRetentionInterval, "RetentionInterval"},
	} {
		if err := interval(iv.v, iv.def, iv.field); err != nil {
			return o, err
		}
	}
	return o, nil
}

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
	// DedupWindow is how long a MessageID (or the body's SHA-256 when there
	// is none) is remembered to collapse resends. Defaults to 10 minutes;
	// at most 7 days; -1 turns de-duplication off.
	DedupWindow time.Duration
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

func validateQueueName(name string) error {
	switch {
	case name == "":
		return errs.Newf(errs.ErrInvalidQueueName, "empty name")
	case len(name) > MaxQueueNameLen:
		return errs.Newf(errs.ErrInvalidQueueName, fmt.Sprintf("%d bytes, at most %d", len(name), MaxQueueNameLen))
	case !queueNameRE.MatchString(name):
		return errs.Newf(errs.ErrInvalidQueueName, fmt.Sprintf("%q: use letters, digits and . _ : - (starting with a letter or digit)", name))
	}
	return nil
}

// resolveQueue validates o and fills in defaults, returning the row to store.
func resolveQueue(name string, o QueueOptions) (engine.Queue, error) {
	if err := validateQueueName(name); err != nil {
		return engine.Queue{}, err
	}
	q := engine.Queue{Name: name, DeadLetterOnTTL: o.DeadLetterOnExpire}
	switch {
	case o.MaxDeliveryCount == 0:
		q.MaxDeliveryCount = DefaultMaxDeliveryCount
	case o.MaxDeliveryCount < 1 || o.MaxDeliveryCount > MaxDeliveryLimit:
		return q, errs.Newf(errs.ErrInvalidMaxDelivery, fmt.Sprintf("%d, want 1 to %d", o.MaxDeliveryCount, MaxDeliveryLimit))
	default:
		q.MaxDeliveryCount = int64(o.MaxDeliveryCount)
	}
	switch {
	case o.LockDuration == 0:
		q.LockDurationMS = DefaultLockDuration.Milliseconds()
	case o.LockDuration < MinLockDuration || o.LockDuration > MaxLockDuration:
		return q, errs.Newf(errs.ErrInvalidLockDuration, fmt.Sprintf("%v, want %v to %v", o.LockDuration, MinLockDuration, MaxLockDuration))
	default:
		q.LockDurationMS = o.LockDuration.Milliseconds()
	}
	switch {
	case o.DedupWindow == 0:
		q.DedupWindowMS = DefaultDedupWindow.Milliseconds()
	case o.DedupWindow == -1:
		q.DedupWindowMS = 0
	case o.DedupWindow < time.Millisecond || o.DedupWindow > MaxDedupWindow:
		return q, errs.Newf(errs.ErrInvalidDedupWindow, fmt.Sprintf("%v, want 1ms to %v, or -1 for off", o.DedupWindow, MaxDedupWindow))
	default:
		q.DedupWindowMS = o.DedupWindow.Milliseconds()
	}
	switch {
	case o.DefaultTTL == 0 || o.DefaultTTL == -1:
	case o.DefaultTTL < time.Millisecond || o.DefaultTTL > MaxTTL:
		return q, errs.Newf(errs.ErrInvalidTTL, fmt.Sprintf("DefaultTTL %v, want 1ms to %v, or 0 for none", o.DefaultTTL, MaxTTL))
	default:
		q.DefaultTTLMS = o.DefaultTTL.Milliseconds()
	}
	switch o.Ordering {
	case Standard:
	case FIFO:
		q.FIFO = true
	default:
		return q, errs.Newf(errs.ErrInvalidOrdering, o.Ordering.String())
	}
	var err error
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
	switch {
	case v == 0:
		return def, nil
	case v == -1:
		return 0, nil
	case v < 0:
		return 0, errs.Newf(errs.ErrInvalidRetention, fmt.Sprintf("DLQ.%s %d, want a positive value, 0 for the default or -1 for none", field, v))
	}
	return v, nil
}

// queueOptions turns a stored row back into the options that produce it.
func queueOptions(q engine.Queue) QueueOptions {
	o := QueueOptions{
		MaxDeliveryCount:   int(q.MaxDeliveryCount),
		LockDuration:       time.Duration(q.LockDurationMS) * time.Millisecond,
		DedupWindow:        time.Duration(q.DedupWindowMS) * time.Millisecond,
		DefaultTTL:         time.Duration(q.DefaultTTLMS) * time.Millisecond,
		DeadLetterOnExpire: q.DeadLetterOnTTL,
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
