// Package testdb holds test helpers: a fake clock and a fresh store per test.
// Library code never imports it.
package testdb

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/fakeclock"
	"github.com/mqlite/mqlite/outbox"
)

// Start is where a new fake Clock stands: fixed, so tests repeat.
var Start = fakeclock.Start

// Clock is a fake mqlite.Clock that moves only when told to (Now, Advance,
// Set). It is safe for concurrent use.
type Clock = fakeclock.Clock

// NewClock returns a fake clock set to Start.
func NewClock() *Clock { return fakeclock.New() }

// Bundle is what Open gives a test.
type Bundle struct {
	Store *mqlite.Store
	Clock *Clock
	Path  string
}

// Open opens a store on a fresh file in t.TempDir() with a fake clock, and
// closes it when the test ends. opts.Clock is replaced by the fake clock.
//
// The background loops are off unless opts sets one of their intervals:
// their ticks run on the wall clock and would change rows under a test at
// random moments. Tests run the sweeps by hand instead (mqlite's own tests
// through RunSweeps), which is deterministic.
func Open(t testing.TB, opts mqlite.Config) *Bundle {
	t.Helper()
	return OpenPath(t, filepath.Join(t.TempDir(), "mq.db"), opts)
}

// OpenPath is Open on the file at path, which may exist already.
func OpenPath(t testing.TB, path string, opts mqlite.Config) *Bundle {
	t.Helper()
	clock := NewClock()
	opts.Clock = clock
	if opts.ReaperInterval == 0 && opts.SchedulerInterval == 0 && opts.TTLInterval == 0 &&
		opts.JanitorInterval == 0 && opts.RetentionInterval == 0 && opts.ScheduleInterval == 0 {
		opts.ReaperInterval, opts.SchedulerInterval, opts.TTLInterval = -1, -1, -1
		opts.JanitorInterval, opts.RetentionInterval, opts.ScheduleInterval = -1, -1, -1
	}
	st, err := mqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &Bundle{Store: st, Clock: clock, Path: path}
}

// Queue creates queue name with opts on b's store, failing the test on error.
func (b *Bundle) Queue(t testing.TB, name string, opts mqlite.QueueOptions) {
	t.Helper()
	if err := b.Store.CreateQueue(context.Background(), name, opts); err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
}

// OpenQueue opens a fresh store, as Open, with queue created with opts.
func OpenQueue(t testing.TB, queue string, opts mqlite.QueueOptions) *Bundle {
	t.Helper()
	b := Open(t, mqlite.Config{})
	b.Queue(t, queue, opts)
	return b
}

// Send sends msgs to queue in one committed transaction of b's store and
// returns their sequence numbers, failing the test on error. A nil Body
// gets one of its own, so that no two messages de-duplicate by accident.
func (b *Bundle) Send(t testing.TB, queue string, msgs ...outbox.Message) []int64 {
	t.Helper()
	msgs = slices.Clone(msgs)
	for i := range msgs {
		if msgs[i].Body == nil {
			msgs[i].Body = fmt.Appendf(nil, "body-%d-%s", i, msgs[i].MessageID)
		}
	}
	res, err := outbox.Send(context.Background(), b.Store, queue, msgs...)
	if err != nil {
		t.Fatalf("send to %s: %v", queue, err)
	}
	seqs := make([]int64, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("send to %s, message %d: %v", queue, i, r.Err)
		}
		seqs[i] = r.Seq
	}
	return seqs
}

// Seqs returns the sequence numbers of msgs, in order.
func Seqs(msgs []mqlite.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

// CPUTime is the user plus system CPU time the process has used. Benchmarks
// report it per message: unlike wall time it hardly moves when other work
// shares the machine.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
