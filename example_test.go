package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// openExample opens a store in a temporary folder with the queue "jobs";
// the returned func closes and removes it.
func openExample(ctx context.Context, opts mqlite.QueueOptions) (*mqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "jobs", opts); err != nil {
		log.Fatal(err)
	}
	return st, func() {
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// sendExample commits one message per body to "jobs".
func sendExample(ctx context.Context, st *mqlite.Store, bodies ...string) {
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, b := range bodies {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "jobs", outbox.Message{Body: []byte(b)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Peek-lock by hand: each received message is locked for the queue's
// LockDuration and settled with its Lock: Complete (done), Abandon (try
// again) or Reject (to the dead letters). A settlement retried after it
// succeeded succeeds again; a stale one is ErrLockLost.
func ExampleStore_Receive() {
	ctx := context.Background()
	st, done := openExample(ctx, mqlite.QueueOptions{})
	defer done()
	sendExample(ctx, st, "resize a.png", "resize b.png", "resize c.txt")

	msgs, err := st.Receive(ctx, "jobs", mqlite.ReceiveOptions{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%s (delivery %d)\n", m.Body, m.DeliveryCount)
		switch string(m.Body) {
		case "resize a.png":
			err = st.Complete(ctx, m.Lock())
		case "resize b.png":
			err = st.Abandon(ctx, m.Lock(), 0) // comes again at once
		default:
			err = st.Reject(ctx, m.Lock(), "unsupported", "not an image")
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	// The reply of the Complete was lost, say: the exact same retry
	// succeeds from its receipt.
	fmt.Println("complete retried:", st.Complete(ctx, msgs[0].Lock()))
	// A settlement of a delivery that is no longer current is refused.
	err = st.Complete(ctx, msgs[1].Lock())
	fmt.Println("abandon retried as complete is ErrLockLost:", errors.Is(err, mqlite.ErrLockLost))

	again, err := st.Receive(ctx, "jobs", mqlite.ReceiveOptions{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range again {
		fmt.Printf("again: %s (delivery %d)\n", m.Body, m.DeliveryCount)
		if err := st.Complete(ctx, m.Lock()); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// resize a.png (delivery 1)
	// resize b.png (delivery 1)
	// resize c.txt (delivery 1)
	// complete retried: <nil>
	// abandon retried as complete is ErrLockLost: true
	// again: resize b.png (delivery 2)
}

// TxAndReceive commits a transaction's work and claims a message in one
// commit: consumer.LoopTx runs each message's step and completion in fn,
// so the commit that completes one message claims the next. The claimed
// message comes back locked, as Receive would give it.
func ExampleStore_TxAndReceive() {
	ctx := context.Background()
	st, done := openExample(ctx, mqlite.QueueOptions{})
	defer done()
	sendExample(ctx, st, "first", "second")
	if _, err := st.DB().Exec(`CREATE TABLE audit (note TEXT)`); err != nil {
		log.Fatal(err)
	}

	next, err := st.TxAndReceive(ctx, "jobs", mqlite.ReceiveOptions{Max: 1}, func(tx *mqlite.Tx) error {
		_, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO audit VALUES ('started')`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("claimed with the commit: %s (delivery %d)\n", next[0].Body, next[0].DeliveryCount)
	fmt.Println("complete:", st.Complete(ctx, next[0].Lock()))
	// Output:
	// claimed with the commit: first (delivery 1)
	// complete: <nil>
}

// A message that failed on every allowed delivery, or was rejected, waits
// in the dead letters with why; Redrive brings it back with its delivery
// count reset once the cause is fixed.
func ExampleStore_Redrive() {
	ctx := context.Background()
	st, done := openExample(ctx, mqlite.QueueOptions{MaxDeliveryCount: 2})
	defer done()
	sendExample(ctx, st, `{"total":"n/a"}`)

	for range 2 { // the handler fails twice: the second Abandon dead-letters
		msgs, err := st.Receive(ctx, "jobs", mqlite.ReceiveOptions{})
		if err != nil {
			log.Fatal(err)
		}
		if err := st.Abandon(ctx, msgs[0].Lock(), 0); err != nil {
			log.Fatal(err)
		}
	}
	msgs, err := st.Receive(ctx, "jobs", mqlite.ReceiveOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("handed out after the limit:", len(msgs))

	dead, err := st.PeekDeadLetters(ctx, "jobs", mqlite.PeekParams{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dead {
		fmt.Printf("dead letter %s: %s after %d deliveries\n", m.Body, m.DeadLetterReason, m.DeliveryCount)
	}

	n, err := st.Redrive(ctx, "jobs", mqlite.RedriveOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("redriven:", n)
	msgs, err = st.Receive(ctx, "jobs", mqlite.ReceiveOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s is back (delivery %d)\n", msgs[0].Body, msgs[0].DeliveryCount)
	// Output:
	// handed out after the limit: 0
	// dead letter {"total":"n/a"}: max delivery count exceeded after 2 deliveries
	// redriven: 1
	// {"total":"n/a"} is back (delivery 1)
}

// A schedule sends one message per period into a queue: here every second
// (a cron expression such as "0 9 * * 1-5" with a TimeZone works the same
// way). The message's MessageID names its period, and a period is sent
// once, whichever process holds the file when it begins.
func ExampleStore_CreateSchedule() {
	ctx := context.Background()
	st, done := openExample(ctx, mqlite.QueueOptions{})
	defer done()

	err := st.CreateSchedule(ctx, "heartbeat", mqlite.ScheduleOptions{
		Target: "jobs", Every: time.Second, Body: []byte("ping"), Subject: "heartbeat",
	})
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := st.Receive(ctx, "jobs", mqlite.ReceiveOptions{Wait: 10 * time.Second, Mode: mqlite.ReceiveAndDelete})
	if err != nil || len(msgs) == 0 {
		log.Fatal("no heartbeat: ", err)
	}
	m := msgs[0]
	fmt.Println(string(m.Body), m.Subject, strings.HasPrefix(m.MessageID, "schedule/heartbeat/"))
	// Output: ping heartbeat true
}

// ExampleStore_ListSchedules reads every schedule a page at a time: each
// page starts after the last name of the one before, and an empty page is
// the end. A name "TARGET/NAME" is in the namespace of its target.
func ExampleStore_ListSchedules() {
	ctx := context.Background()
	st, done := openExample(ctx, mqlite.QueueOptions{})
	defer done()

	for _, name := range []string{"jobs/hourly", "jobs/nightly", "weekly"} {
		if err := st.CreateSchedule(ctx, name, mqlite.ScheduleOptions{Target: "jobs", Every: time.Hour}); err != nil {
			log.Fatal(err)
		}
	}
	for opts := (mqlite.ListSchedulesParams{Max: 2}); ; {
		page, err := st.ListSchedules(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, s := range page {
			fmt.Printf("%s (namespace %q)\n", s.Name, mqlite.ScheduleNamespace(s.Name))
		}
		opts.After = page[len(page)-1].Name
	}
	// Output:
	// jobs/hourly (namespace "jobs")
	// jobs/nightly (namespace "jobs")
	// weekly (namespace "")
}
