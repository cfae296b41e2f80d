package mqlite_test

// The promises of topics run in the conformance kit (conformance/topics.go),
// over this store and over the broker's client; what is left here is the
// embedded store's own.

import (
	"context"
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// topicSetup is a store with topic "orders" and the subscriptions given.
func topicSetup(t *testing.T, subs map[string]mqlite.SubscriptionOptions) *sweepBundle {
	t.Helper()
	b := sweepSetup(t)
	ctx := context.Background()
	if err := b.Store.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for q, o := range subs {
		if err := b.Store.CreateSubscription(ctx, "orders", q, o); err != nil {
			t.Fatalf("subscribe %s: %v", q, err)
		}
	}
	return b
}

// publish sends msgs to the topic in one transaction.
func (b *sweepBundle) publish(msgs ...outbox.Message) {
	b.t.Helper()
	_, err := outbox.Send(context.Background(), b.Store, "orders", msgs...)
	if err != nil {
		b.t.Fatalf("publish: %v", err)
	}
}

func bodies(msgs []mqlite.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// TestFIFOSubscriptionKeepsGroupOrder: a FIFO subscription hands its copies
// out one at a time, in order.
func TestFIFOSubscriptionKeepsGroupOrder(t *testing.T) {
	b := topicSetup(t, map[string]mqlite.SubscriptionOptions{"fifo": {Queue: mqlite.QueueOptions{Ordering: mqlite.FIFO}}})
	ctx := context.Background()
	b.publish(body("1"), body("2"), body("3"))
	for _, want := range []string{"1", "2", "3"} {
		got := b.receive("fifo", 10)
		if !slices.Equal(bodies(got), []string{want}) {
			t.Fatalf("got %v, want only %s", bodies(got), want)
		}
		if err := b.Store.Complete(ctx, got[0].Lock()); err != nil {
			t.Fatal(err)
		}
	}
}
