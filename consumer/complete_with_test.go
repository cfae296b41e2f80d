package consumer_test

import (
	"context"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestCompleteWithClaimsNothing: CompleteWith commits the completion and
// the step's writes, and claims nothing in that commit: the next message
// of the queue is still there for the next Receive, on its first
// delivery, not held by a claim nobody got.
func TestCompleteWithClaimsNothing(t *testing.T) {
	t.Parallel()
	tb := testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
	must(t, tb.Store.CreateQueue(ctx, "out", mqlite.QueueOptions{}))
	_, err := outbox.Send(ctx, tb.Store, "q", outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b")})
	must(t, err)
	msgs, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
	must(t, err)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	must(t, consumer.CompleteWith(ctx, tb.Store, msgs[0].Lock(), func(ctx context.Context, tx consumer.Tx) error {
		return tx.Send(ctx, "out", outbox.Message{Body: msgs[0].Body})
	}))
	next, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
	must(t, err)
	if len(next) != 1 || string(next[0].Body) != "b" || next[0].DeliveryCount != 1 {
		t.Fatalf("after CompleteWith the next receive got %+v, want message b on its first delivery", next)
	}
}
