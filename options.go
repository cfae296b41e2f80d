package mqlite

import (
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/setting"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultBusyTimeout     = 5 * time.Second
	DefaultMaxMessageBytes = 1 << 20
)

// The bounds of Config.AttemptHistory: how many failed deliveries a
// message keeps by default, and at most.
const (
	DefaultAttemptHistory = driver.DefaultAttemptHistory
	MaxAttemptHistory     = driver.MaxAttemptHistory
)

// MaxMessageBytesLimit is the largest Config.MaxMessageBytes. A message
// costs several times its size in memory on its way in and out (SQLite
// binds, copies and returns whole values; see docs/operations.md), so large
// payloads belong in a file or an object store, with their address in the
// message.
const MaxMessageBytesLimit = 16 << 20

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

// Config configures Open: what builds a Store, which lives until Close. The
// zero value is ready to use. Across mqlite a Config builds a long-lived
// thing (a Store, a Loop, a relay, a broker, a client), …Options shape one
// call (QueueOptions, ReceiveOptions), and …Params one query (PeekParams).
type Config struct {
	// Sync is the durability point. Defaults to SyncNormal, or to SyncFull
	// when the environment variable MQLITE_SYNC is "full".
	Sync SyncMode
	// BusyTimeout is how long a statement waits for a lock held by a
	// foreign connection (a backup tool, the sqlite3 shell). Defaults to 5s.
	BusyTimeout time.Duration
	// MaxConns bounds the connections a store on PostgreSQL keeps to its
	// database (its own statements, and the application's transactions on
	// DB()), besides the one that listens for other processes' commits.
	// Defaults to 8. A SQLite store always has one connection.
	MaxConns int
	// MaxMessageBytes is the largest message: its body and its metadata
	// (MessageID, GroupID, Subject, Properties) together. Defaults to
	// 1 MiB; at most MaxMessageBytesLimit (16 MiB).
	MaxMessageBytes int
	// AttemptHistory is how many failed deliveries each message keeps in
	// its history (Message.Attempts): the last ones, each with its error,
	// time and worker. A failed delivery is an Abandon (with or without a
	// reason), a Reject, or a lease that lapsed or that an ended process
	// left; a completion, a Defer or a Release records none. Defaults to
	// DefaultAttemptHistory (10); negative keeps none; at most
	// MaxAttemptHistory. A message that never fails costs nothing: its
	// history is written only by a failure. See docs/concepts.md, "Attempt
	// history".
	AttemptHistory int
	// Clock is the source of every timestamp. Defaults to SystemClock.
	Clock Clock
	// Logger receives the store's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider receives the store's OpenTelemetry spans (a receive
	// span per claim that got messages, a settle span per settlement), and
	// those of consumer.Loop and the relay over the store. Defaults to
	// otel.GetTracerProvider(), read at each span: tracing is off, at no
	// cost, until the application sets a provider. See docs/operations.md,
	// "Tracing".
	TracerProvider trace.TracerProvider
	// WaitForLock makes Open wait while another store (another process, or
	// this one) holds the file, instead of failing with ErrDBLocked: a hot
	// standby. Open takes the file within milliseconds of the holder's
	// Close or death (the kernel drops a dead process's locks), runs the
	// crash recovery and returns the store. Bound the wait with Open's ctx
	// (a deadline, or a cancel on shutdown); there is no separate timeout.
	// Defaults to false: fail at once. See docs/operations.md, "Hot standby".
	WaitForLock bool
	// ExistingOnly makes Open neither create nor migrate: the file must
	// hold a store in this binary's layout. A missing file, or a SQLite file
	// without mqlite's schema, is ErrNoStore, and nothing is created or
	// written (no file, no lock file, the same bytes); a store of an older
	// layout is ErrMigrationNeeded, untouched. For an application that
	// migrates on its own terms (Migrate, `mqlite migrate`, or the SQL of
	// `mqlite schema`), and for tools that only read. Defaults to false:
	// Open creates the store in a file that has none and migrates an older
	// one.
	ExistingOnly bool

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
	// ScheduleInterval is the longest the schedule loop sleeps. The loop
	// wakes at the start of each schedule's next period (Store.CreateSchedule)
	// by a timer; this bound only covers a wall clock that jumps. Defaults
	// to 1m; -1 turns the loop off in this store: the schedules stay in the
	// file, and the next store that runs them catches up (see
	// ScheduleOptions.CatchUp). UpdateSchedule still sends the periods of
	// the schedule it changes that have already begun.
	ScheduleInterval time.Duration
}

// Default intervals of the background loops.
const (
	DefaultReaperInterval    = time.Second
	DefaultSchedulerInterval = time.Second
	DefaultTTLInterval       = 5 * time.Second
	DefaultJanitorInterval   = time.Minute
	DefaultRetentionInterval = time.Minute
	DefaultScheduleInterval  = time.Minute
)

// interval resolves one loop interval: 0 is def, -1 is off (0), any other
// negative value is an error.
func interval(v *time.Duration, def time.Duration, field string) error {
	var err error
	if *v, err = setting.DefaultOrOff(field, *v, def, 0); err != nil {
		return invalidf(ErrInvalidArgument, "%v", err)
	}
	return nil
}

func (o Config) withDefaults() (Config, error) {
	if o.Sync == SyncNormal && strings.EqualFold(os.Getenv("MQLITE_SYNC"), "full") {
		o.Sync = SyncFull
	}
	if o.Sync != SyncNormal && o.Sync != SyncFull {
		return o, invalidf(ErrInvalidArgument, "unknown SyncMode %d", o.Sync)
	}
	if o.BusyTimeout < 0 {
		return o, invalidf(ErrInvalidArgument, "negative BusyTimeout")
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.MaxConns < 0 {
		return o, invalidf(ErrInvalidArgument, "negative MaxConns")
	}
	if o.MaxMessageBytes < 0 || o.MaxMessageBytes > MaxMessageBytesLimit {
		return o, invalidf(ErrInvalidArgument, "MaxMessageBytes %d out of range", o.MaxMessageBytes)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.AttemptHistory > MaxAttemptHistory {
		return o, invalidf(ErrInvalidArgument, "AttemptHistory %d past MaxAttemptHistory (%d)", o.AttemptHistory, MaxAttemptHistory)
	}
	if o.AttemptHistory == 0 {
		o.AttemptHistory = DefaultAttemptHistory
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
		{&o.ScheduleInterval, DefaultScheduleInterval, "ScheduleInterval"},
	} {
		if err := interval(iv.v, iv.def, iv.field); err != nil {
			return o, err
		}
	}
	return o, nil
}
