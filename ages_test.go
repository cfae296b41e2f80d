package mqlite_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestAges: every queue, by name, with the age of its claimable message of
// lowest seq (a locked, scheduled or held message is not claimable) and
// the time since its dead letter of lowest seq was dead-lettered, on the
// store's clock; an empty queue reports zeros.
func TestAges(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	st, ctx := tb.Store, context.Background()
	for _, q := range []string{"work", "empty", "grouped"} {
		tb.Queue(t, q, mqlite.QueueOptions{})
	}
	sendCommitted(t, st, "work", outbox.Message{Body: []byte("locked")})
	sendCommitted(t, st, "work", outbox.Message{Body: []byte("scheduled"), DeliverAt: tb.Clock.Now().Add(time.Hour)})
	sendCommitted(t, st, "grouped", outbox.Message{Body: []byte("front"), GroupID: "g"})
	sendCommitted(t, st, "grouped", outbox.Message{Body: []byte("held"), GroupID: "g"}) // held behind the front
	tb.Clock.Advance(10 * time.Second)
	sendCommitted(t, st, "work", outbox.Message{Body: []byte("waiting")}) // sent at 10s
	var front mqlite.Message
	for _, q := range []string{"work", "grouped"} {
		got, err := st.Receive(ctx, q, mqlite.ReceiveOptions{Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatalf("receive %s: %v %v", q, got, err)
		}
		front = got[0]
	}
	ages := func(want ...mqlite.QueueAges) {
		t.Helper()
		got, err := st.Ages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Ages: %+v\nwant %+v", got, want)
		}
	}
	// At 10s: grouped's front is locked and the other member held behind it.
	ages(mqlite.QueueAges{Queue: "empty"}, mqlite.QueueAges{Queue: "grouped"}, mqlite.QueueAges{Queue: "work"})
	if err := st.Reject(ctx, front.Lock(), "bad", ""); err != nil { // releases the held one
		t.Fatal(err)
	}
	tb.Clock.Advance(30 * time.Second)
	ages(mqlite.QueueAges{Queue: "empty"},
		mqlite.QueueAges{Queue: "grouped", OldestActive: 40 * time.Second, OldestDeadLetter: 30 * time.Second},
		mqlite.QueueAges{Queue: "work", OldestActive: 30 * time.Second})
}
