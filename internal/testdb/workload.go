package testdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// WorkloadQueue is the options of the queue MetricsWorkload runs on: two
// deliveries at most, a one-second lease, bodies deduplicated.
var WorkloadQueue = mqlite.QueueOptions{MaxDeliveryCount: 2, LockDuration: time.Second, DedupByBody: true}

// Workload is what MetricsWorkload leaves on its queue.
type Workload struct {
	Counters             mqlite.QueueCounters
	Active, DeadLettered int64
}

// MetricsWorkload runs a known sequence on queue (empty, created with
// WorkloadQueue), sending with send and moving clock (the store's) past one
// lease: five sends and a resend of a body the dedup window collapses; a complete and
// its replay; an abandon, then an abandon of the redelivery on its last
// allowed delivery (dead-lettered); a reject; a lease lost (its late
// Complete refused) and the message redelivered and completed. It returns
// the counters and the states that must follow, exactly.
func MetricsWorkload(t testing.TB, c consumer.Store, queue string, send func(body string), clock *Clock) Workload {
	t.Helper()
	ctx := context.Background()
	for _, b := range []string{"m1", "m2", "m3", "m4", "m5", "m1"} {
		send(b)
	}
	receive := func(want string, dc int) mqlite.Message {
		t.Helper()
		msgs, err := c.Receive(ctx, queue, mqlite.ReceiveOptions{Max: 1})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %v, %d messages", err, len(msgs))
		}
		if m := msgs[0]; string(m.Body) != want || m.DeliveryCount != dc {
			t.Fatalf("received %q (delivery %d), want %q (delivery %d)", m.Body, m.DeliveryCount, want, dc)
		}
		return msgs[0]
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	m := receive("m1", 1)
	check("complete", c.Complete(ctx, m.Lock()))
	check("complete replay", c.Complete(ctx, m.Lock()))
	m = receive("m2", 1)
	check("abandon", c.Abandon(ctx, m.Lock(), 0))
	m = receive("m2", 2)
	check("abandon the last delivery", c.Abandon(ctx, m.Lock(), 0))
	m = receive("m3", 1)
	check("reject", c.Reject(ctx, m.Lock(), "bad", "a test"))
	m = receive("m4", 1)
	clock.Advance(2 * time.Second)
	if err := c.Complete(ctx, m.Lock()); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("late complete: %v, want ErrLockLost", err)
	}
	m = receive("m4", 2)
	check("complete the redelivery", c.Complete(ctx, m.Lock()))
	return Workload{
		Counters: mqlite.QueueCounters{Sent: 5, Received: 6, Completed: 2, Abandoned: 2, Rejected: 1,
			DeadLettered: 2, LockLost: 1, Redelivered: 2},
		Active: 1, DeadLettered: 2,
	}
}
