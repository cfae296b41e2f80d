package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// Scheduler creates periodic messages. A Store that is also a Scheduler
// (mqlite.Store and client.Client are) has the Periodic subtests run; they
// need the implementation's schedule loop on (Config.ScheduleInterval not
// -1), which sends each period's message by itself.
type Scheduler interface {
	// CreateSchedule creates a schedule; see mqlite.Store.CreateSchedule.
	CreateSchedule(ctx context.Context, name string, opts mqlite.ScheduleOptions) error
	// GetSchedule reads one; see mqlite.Store.GetSchedule.
	GetSchedule(ctx context.Context, name string) (mqlite.ScheduleInfo, error)
}

// wantPeriods receives from queue, waiting up to wait, and fails unless it
// gets the messages of schedule name for the periods want, in order.
func (k *kit) wantPeriods(queue, name string, wait time.Duration, want ...time.Time) {
	k.t.Helper()
	msgs := k.receive(queue, mqlite.ReceiveOptions{Max: 100, Wait: wait})
	if len(msgs) != len(want) {
		k.t.Fatalf("received %d messages of %s, want %d", len(msgs), name, len(want))
	}
	for i, m := range msgs {
		if id := mqlite.ScheduleMessageID(name, want[i]); m.MessageID != id {
			k.t.Fatalf("message %d is %s, want %s", i, m.MessageID, id)
		}
	}
}

// periodicTests: a schedule sends one message per period, by itself, each
// period once, and catches up after a restart within its CatchUp bound.
var periodicTests = []subtest{
	{"OncePerPeriod", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutWallClock)
		k := openWith(t, h, Config{WallClock: true})
		sc := optional[Scheduler](k, "conformance.Scheduler")
		k.queue("q", mqlite.QueueOptions{DedupWindow: -1})
		k.must(sc.CreateSchedule(k.ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Second}), "create schedule")
		info, err := sc.GetSchedule(k.ctx, "s")
		k.must(err, "get schedule")
		first := info.Options.Start.Add(time.Second)
		k.wantPeriods("q", "s", 10*time.Second, first)
		k.wantPeriods("q", "s", 10*time.Second, first.Add(time.Second))
	}},
	{"RestartCatchesUpWithinBound", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		sc := optional[Scheduler](k, "conformance.Scheduler")
		k.queue("q", mqlite.QueueOptions{DedupWindow: -1})
		k.must(sc.CreateSchedule(k.ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Minute, CatchUp: 2}),
			"create schedule")
		start := k.clock.Now()
		k.advance(5*time.Minute + 30*time.Second) // five periods begin while nobody looks
		k.restart()
		// One transaction sends the latest two; the receive wakes on it.
		k.wantPeriods("q", "s", 10*time.Second, start.Add(4*time.Minute), start.Add(5*time.Minute))
		info, err := optional[Scheduler](k, "conformance.Scheduler").GetSchedule(k.ctx, "s")
		k.must(err, "get schedule")
		if info.Fired != 2 || info.Skipped != 3 {
			t.Fatalf("fired %d, skipped %d; want 2 and 3", info.Fired, info.Skipped)
		}
		k.none("q")
	}},
}
