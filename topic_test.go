package mqlite_test

import (
	"context"
	"errors"
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

// publish sends msgs to the topic in one transaction and returns the results.
func (b *sweepBundle) publish(msgs ...outbox.Message) []outbox.Result {
	b.t.Helper()
	var res []outbox.Result
	err := b.Store.Tx(context.Background(), func(tx *mqlite.Tx) error {
		var err error
		res, err = outbox.SendBatch(tx.Context(), tx.SQL(), "orders", msgs)
		return err
	})
	if err != nil {
		b.t.Fatalf("publish: %v", err)
	}
	return res
}

func bodies(msgs []mqlite.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// TestTopicFanOutIsAtomic: every subscription gets its copy in the sender's
// transaction; a rollback leaves none anywhere.
func TestTopicFanOutIsAtomic(t *testing.T) {
	b := topicSetup(t, map[string]mqlite.SubscriptionOptions{"mailer": {}, "ledger": {}, "audit": {}})
	ctx := context.Background()
	rollback := errors.New("rollback")
	err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", body("lost")); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	res := b.publish(body("kept"))
	if got := len(res[0].Copies); got != 3 {
		t.Fatalf("copies %d, want 3", got)
	}
	for i, q := range []string{"audit", "ledger", "mailer"} { // queue name order
		if c := res[0].Copies[i]; c.Queue != q || c.Seq == 0 || c.Err != nil {
			t.Fatalf("copy %d: %+v, want one in %s", i, c, q)
		}
		if got := bodies(b.receive(q, 10)); !slices.Equal(got, []string{"kept"}) {
			t.Fatalf("%s holds %v, want only the committed copy", q, got)
		}
	}
	if res[0].Seq != res[0].Copies[0].Seq {
		t.Fatalf("Result.Seq %d, want the first copy's %d", res[0].Seq, res[0].Copies[0].Seq)
	}
}

// TestTopicFiltersRouteExactly: each subscription gets exactly the messages
// its filter takes; a message nobody takes writes nothing and is no error.
func TestTopicFiltersRouteExactly(t *testing.T) {
	b := topicSetup(t, map[string]mqlite.SubscriptionOptions{
		"all":     {},
		"placed":  {Filter: mqlite.Filter{Subject: "order.placed"}},
		"order-x": {Filter: mqlite.Filter{SubjectPrefix: "order."}},
		"eu-us":   {Filter: mqlite.Filter{Properties: map[string]mqlite.Match{"region": mqlite.In("eu", "us")}}},
		"vip-eu": {Filter: mqlite.Filter{SubjectPrefix: "order.", Properties: map[string]mqlite.Match{
			"region": mqlite.In("eu"), "tier": mqlite.Prefix("vip")}}},
	})
	msg := func(name, subject string, props map[string]string) outbox.Message {
		return outbox.Message{Body: []byte(name), Subject: subject, Properties: props}
	}
	b.publish(
		msg("m1", "order.placed", map[string]string{"region": "eu", "tier": "vip-gold"}),
		msg("m2", "order.shipped", map[string]string{"region": "us"}),
		msg("m3", "user.created", map[string]string{"region": "asia"}),
		msg("m4", "order.placed", nil),
		msg("m5", "order.placed", map[string]string{"region": "eu", "tier": "basic"}),
	)
	for q, want := range map[string][]string{
		"all":     {"m1", "m2", "m3", "m4", "m5"},
		"placed":  {"m1", "m4", "m5"},
		"order-x": {"m1", "m2", "m4", "m5"},
		"eu-us":   {"m1", "m2", "m5"},
		"vip-eu":  {"m1"},
	} {
		if got := bodies(b.receive(q, 100)); !slices.Equal(got, want) {
			t.Errorf("%s got %v, want %v", q, got, want)
		}
	}

	if err := b.Store.DeleteSubscription(context.Background(), "orders", "all"); err != nil {
		t.Fatal(err)
	}
	res := b.publish(msg("nobody", "user.deleted", nil))
	if res[0].Seq != 0 || len(res[0].Copies) != 0 || res[0].Err != nil {
		t.Fatalf("a message no subscription takes: %+v, want no copy and no error", res[0])
	}
}

// TestSubscriptionsAreDisjoint: a copy dead-lettered, settled or deduped in
// one subscription changes nothing in another; a subscription added later
// gets only what is sent after it; removing one leaves the others be.
func TestSubscriptionsAreDisjoint(t *testing.T) {
	b := topicSetup(t, map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
	ctx := context.Background()
	b.publish(outbox.Message{Body: []byte("x"), MessageID: "id-1"})
	if err := b.Store.CreateSubscription(ctx, "orders", "late", mqlite.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	ma, mb := b.receive("a", 1)[0], b.receive("b", 1)[0]
	if ma.LockToken == mb.LockToken || ma.Seq == mb.Seq {
		t.Fatalf("copies share a seq or token: %+v %+v", ma, mb)
	}
	if err := b.Store.Reject(ctx, ma.Lock(), "bad", ""); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Complete(ctx, mqlite.Lock{Queue: "a", Seq: mb.Seq, Token: mb.LockToken}); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("b's lock presented on a: %v, want ErrLockLost", err)
	}
	b.wantState("b", mb.Seq, mqlite.StateLocked)
	if err := b.Store.Complete(ctx, mb.Lock()); err != nil {
		t.Fatal(err)
	}
	// A resend inside the window: a duplicate in a and b, new in late.
	res := b.publish(outbox.Message{Body: []byte("x"), MessageID: "id-1"})
	for _, c := range res[0].Copies {
		if want := c.Queue != "late"; c.Duplicate != want {
			t.Errorf("resend in %s: duplicate %v, want %v", c.Queue, c.Duplicate, want)
		}
	}
	if got := bodies(b.receive("late", 10)); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("late got %v, want only the message sent after it subscribed", got)
	}
	if err := b.Store.DeleteSubscription(ctx, "orders", "b"); err != nil {
		t.Fatal(err)
	}
	if dead, err := b.Store.PeekDeadLetters(ctx, "a", mqlite.PeekOptions{}); err != nil || len(dead) != 1 {
		t.Fatalf("a's dead letters after b left: %d %v", len(dead), err)
	}
	if _, err := b.Store.GetQueue(ctx, "b"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("b's queue after DeleteSubscription: %v, want ErrQueueNotFound", err)
	}
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

// TestTopicAdminErrors: each bad call has its typed error and writes
// nothing.
func TestTopicAdminErrors(t *testing.T) {
	b := topicSetup(t, map[string]mqlite.SubscriptionOptions{"sub": {}})
	ctx := context.Background()
	b.Queue(t, "plain", mqlite.QueueOptions{})
	st := b.Store
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"bad topic name", func() error { return st.CreateTopic(ctx, "bad name") }, mqlite.ErrInvalidTopicName},
		{"topic over a queue", func() error { return st.CreateTopic(ctx, "plain") }, mqlite.ErrTopicExists},
		{"topic twice", func() error { return st.CreateTopic(ctx, "orders") }, mqlite.ErrTopicExists},
		{"queue over a topic", func() error { return st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}) }, mqlite.ErrQueueExists},
		{"subscription of no topic", func() error {
			return st.CreateSubscription(ctx, "nope", "q2", mqlite.SubscriptionOptions{})
		}, mqlite.ErrTopicNotFound},
		{"subscription over a queue", func() error {
			return st.CreateSubscription(ctx, "orders", "plain", mqlite.SubscriptionOptions{})
		}, mqlite.ErrQueueExists},
		{"match with neither In nor Prefix", func() error {
			return st.CreateSubscription(ctx, "orders", "q3", mqlite.SubscriptionOptions{
				Filter: mqlite.Filter{Properties: map[string]mqlite.Match{"k": {}}}})
		}, mqlite.ErrInvalidFilter},
		{"update a missing subscription", func() error {
			return st.UpdateSubscription(ctx, "orders", "plain", mqlite.Filter{})
		}, mqlite.ErrSubscriptionNotFound},
		{"delete a missing subscription", func() error { return st.DeleteSubscription(ctx, "orders", "plain") }, mqlite.ErrSubscriptionNotFound},
		{"get a missing topic", func() error { _, err := st.GetTopic(ctx, "nope"); return err }, mqlite.ErrTopicNotFound},
		{"delete a missing topic", func() error { return st.DeleteTopic(ctx, "nope") }, mqlite.ErrTopicNotFound},
		{"send to nothing", func() error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "nope", body("x"))
				return err
			})
		}, mqlite.ErrQueueNotFound},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	topics, err := st.ListTopics(ctx)
	if err != nil || len(topics) != 1 || len(topics[0].Subscriptions) != 1 || topics[0].Subscriptions[0].Queue != "sub" {
		t.Fatalf("after the refused calls: %+v %v", topics, err)
	}
	if err := st.UpdateSubscription(ctx, "orders", "sub", mqlite.Filter{SubjectPrefix: "a."}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetTopic(ctx, "orders"); err != nil || got.Subscriptions[0].Filter.SubjectPrefix != "a." {
		t.Fatalf("after the update: %+v %v", got, err)
	}
	if err := st.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetQueue(ctx, "sub"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("a deleted topic's subscription queue: %v, want ErrQueueNotFound", err)
	}
}
