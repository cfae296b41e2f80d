package conformance

import (
	"errors"
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// topic creates topic name with the subscriptions subs (queue → options; a
// zero LockDuration becomes lease) and returns the store's Topics.
func (k *kit) topic(name string, subs map[string]mqlite.SubscriptionOptions) Topics {
	k.t.Helper()
	tp := optional[Topics](k, "conformance.Topics")
	k.must(tp.CreateTopic(k.ctx, name), "create topic")
	for q, o := range subs {
		if o.Queue.LockDuration == 0 {
			o.Queue.LockDuration = lease
		}
		k.must(tp.CreateSubscription(k.ctx, name, q, o), "subscribe "+q)
	}
	return tp
}

// bodiesOf claims up to 100 messages of queue and returns their bodies in
// the order handed out.
func (k *kit) bodiesOf(queue string) []string {
	k.t.Helper()
	var out []string
	for _, m := range k.receive(queue, mqlite.ReceiveOptions{Max: 100}) {
		out = append(out, string(m.Body))
	}
	return out
}

// text is a message with body b and the subject and properties given.
func text(b, subject string, props map[string]string) outbox.Message {
	return outbox.Message{Body: []byte(b), Subject: subject, Properties: props}
}

// topicTests: a send to a topic writes one copy into every subscription
// whose filter the message passes, in the sender's transaction; each copy
// is an ordinary message of its queue, independent of the others; topics
// and queues share one namespace (docs/concepts.md, "Topics").
var topicTests = []subtest{
	{"FanOutCopiesInQueueNameOrder", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.topic("orders", map[string]mqlite.SubscriptionOptions{"mailer": {}, "ledger": {}, "audit": {}})
		res, err := k.sendAll("orders", text("kept", "", nil))
		k.must(err, "send to the topic")
		r := res[0]
		if len(r.Copies) != 3 {
			t.Fatalf("copies %+v, want 3", r.Copies)
		}
		for i, q := range []string{"audit", "ledger", "mailer"} {
			if c := r.Copies[i]; c.Queue != q || c.Seq == 0 || c.Err != nil || c.Duplicate {
				t.Fatalf("copy %d: %+v, want a new one in %s", i, c, q)
			}
			if got := k.bodiesOf(q); !slices.Equal(got, []string{"kept"}) {
				t.Fatalf("%s holds %v, want the one copy", q, got)
			}
		}
		if r.Seq != r.Copies[0].Seq || r.Err != nil {
			t.Fatalf("Result %+v, want the first copy's seq", r)
		}
	}},
	{"RollbackLeavesNoCopy", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		k := open(t, h)
		k.topic("orders", map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
		rollback := errors.New("rollback")
		err := k.in.Tx(k.ctx, func(send SendFunc) error {
			if _, err := send("orders", text("lost", "", nil)); err != nil {
				return err
			}
			return rollback
		})
		k.wantErr(err, rollback, "rolled-back send")
		k.none("a")
		k.none("b")
	}},
	{"FiltersRouteExactly", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.topic("orders", map[string]mqlite.SubscriptionOptions{
			"all":     {},
			"placed":  {Filter: mqlite.Filter{Subject: "order.placed"}},
			"order-x": {Filter: mqlite.Filter{SubjectPrefix: "order."}},
			"eu-us":   {Filter: mqlite.Filter{Properties: map[string]mqlite.Match{"region": mqlite.In("eu", "us")}}},
			"vip-eu": {Filter: mqlite.Filter{SubjectPrefix: "order.", Properties: map[string]mqlite.Match{
				"region": mqlite.In("eu"), "tier": mqlite.Prefix("vip")}}},
			// A missing property is not an empty one: In("") takes a
			// message whose region is "", not one without a region.
			"blank": {Filter: mqlite.Filter{Properties: map[string]mqlite.Match{"region": mqlite.In("", "none")}}},
		})
		k.send("orders",
			text("m1", "order.placed", map[string]string{"region": "eu", "tier": "vip-gold"}),
			text("m2", "order.shipped", map[string]string{"region": "us"}),
			text("m3", "user.created", map[string]string{"region": "asia"}),
			text("m4", "order.placed", nil),
			text("m5", "order.placed", map[string]string{"region": "eu", "tier": "basic"}),
			text("m6", "order.placed.eu", map[string]string{"region": ""}), // an exact Subject is not a prefix
		)
		for _, tc := range []struct {
			queue string
			want  []string
		}{
			{"all", []string{"m1", "m2", "m3", "m4", "m5", "m6"}},
			{"placed", []string{"m1", "m4", "m5"}},
			{"order-x", []string{"m1", "m2", "m4", "m5", "m6"}},
			{"eu-us", []string{"m1", "m2", "m5"}},
			{"vip-eu", []string{"m1"}},
			{"blank", []string{"m6"}},
		} {
			if got := k.bodiesOf(tc.queue); !slices.Equal(got, tc.want) {
				t.Errorf("%s got %v, want %v", tc.queue, got, tc.want)
			}
		}
	}},
	{"NoSubscriberIsNoError", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.topic("orders", map[string]mqlite.SubscriptionOptions{"placed": {Filter: mqlite.Filter{Subject: "order.placed"}}})
		for _, to := range []string{"orders", "empty"} {
			if to == "empty" {
				k.topic("empty", nil)
			}
			res, err := k.sendAll(to, text("nobody", "user.deleted", nil))
			k.must(err, "send to "+to)
			if r := res[0]; r.Seq != 0 || len(r.Copies) != 0 || r.Err != nil || r.Duplicate {
				t.Fatalf("%s: %+v, want no copy and no error", to, r)
			}
		}
		k.none("placed")
	}},
	{"SubscriptionChangesApplyToLaterSends", func(t *testing.T, h Harness) {
		k := open(t, h)
		tp := k.topic("orders", map[string]mqlite.SubscriptionOptions{"sub": {Filter: mqlite.Filter{Subject: "a"}}})
		k.send("orders", text("a1", "a", nil), text("b1", "b", nil))
		k.must(tp.UpdateSubscription(k.ctx, "orders", "sub", mqlite.Filter{Subject: "b"}), "update")
		k.must(tp.CreateSubscription(k.ctx, "orders", "late", mqlite.SubscriptionOptions{Queue: mqlite.QueueOptions{LockDuration: lease}}), "subscribe late")
		k.send("orders", text("a2", "a", nil), text("b2", "b", nil))
		if got := k.bodiesOf("sub"); !slices.Equal(got, []string{"a1", "b2"}) {
			t.Fatalf("sub got %v, want a1 under the old filter and b2 under the new", got)
		}
		if got := k.bodiesOf("late"); !slices.Equal(got, []string{"a2", "b2"}) {
			t.Fatalf("late got %v, want only what was sent after it subscribed", got)
		}
		info, err := tp.GetTopic(k.ctx, "orders")
		k.must(err, "get topic")
		names := make([]string, len(info.Subscriptions))
		for i, s := range info.Subscriptions {
			names[i] = s.Queue
			if s.Queue == "sub" && s.Filter.Subject != "b" {
				t.Fatalf("sub's filter reads %+v, want subject b", s.Filter)
			}
		}
		if !slices.Equal(names, []string{"late", "sub"}) {
			t.Fatalf("subscriptions %v, want [late sub]", names)
		}
	}},
	{"CopiesAreIndependent", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.topic("orders", map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
		k.send("orders", outbox.Message{Body: []byte("x"), MessageID: "id-1"})
		ma := k.receive("a", mqlite.ReceiveOptions{})[0]
		mb := k.receive("b", mqlite.ReceiveOptions{})[0]
		if ma.LockToken == mb.LockToken {
			t.Fatal("two copies share a lock token")
		}
		k.must(k.st.Reject(k.ctx, ma.Lock(), "bad", ""), "reject a's copy")
		k.wantErr(k.st.Complete(k.ctx, mqlite.Lock{Queue: "a", Seq: mb.Seq, Token: mb.LockToken}), mqlite.ErrLockLost,
			"b's lock presented on a")
		k.must(k.st.Complete(k.ctx, mb.Lock()), "complete b's copy")
		if dl := k.deadLetters("a"); len(dl) != 1 {
			t.Fatalf("a has %d dead letters, want its rejected copy", len(dl))
		}
		if s := k.stats("b"); s.Total() != 0 {
			t.Fatalf("b holds %d messages after its copy completed, want 0", s.Total())
		}
	}},
	{"DedupIsPerSubscription", func(t *testing.T, h Harness) {
		k := open(t, h)
		tp := k.topic("orders", map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
		m := outbox.Message{Body: []byte("x"), MessageID: "id-1"}
		first := k.sendOne("orders", m)
		k.must(tp.CreateSubscription(k.ctx, "orders", "late", mqlite.SubscriptionOptions{Queue: mqlite.QueueOptions{LockDuration: lease}}), "subscribe late")
		again := k.sendOne("orders", m)
		if len(again.Copies) != 3 {
			t.Fatalf("resend copies %+v, want 3", again.Copies)
		}
		for i, c := range again.Copies { // a, b, late
			if c.Queue == "late" {
				if c.Duplicate || c.Seq == 0 {
					t.Errorf("late: %+v, want a new copy", c)
				}
				continue
			}
			if !c.Duplicate || c.Seq != first.Copies[i].Seq {
				t.Errorf("%s: %+v, want a duplicate of seq %d", c.Queue, c, first.Copies[i].Seq)
			}
		}
		conflict := k.sendOne("orders", outbox.Message{Body: []byte("y"), MessageID: "id-1"})
		if !errors.Is(conflict.Err, mqlite.ErrDuplicateConflict) {
			t.Fatalf("same id, other body: %+v, want ErrDuplicateConflict", conflict)
		}
	}},
	{"DeleteRemovesQueues", func(t *testing.T, h Harness) {
		k := open(t, h)
		tp := k.topic("orders", map[string]mqlite.SubscriptionOptions{"a": {}, "b": {}})
		k.send("orders", text("x", "", nil))
		k.must(tp.DeleteSubscription(k.ctx, "orders", "b"), "delete subscription b")
		_, err := k.st.Receive(k.ctx, "b", mqlite.ReceiveOptions{})
		k.wantErr(err, mqlite.ErrQueueNotFound, "receive from a deleted subscription's queue")
		if got := k.bodiesOf("a"); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("a got %v after b left, want its copy", got)
		}
		k.must(tp.DeleteTopic(k.ctx, "orders"), "delete topic")
		_, err = k.st.Receive(k.ctx, "a", mqlite.ReceiveOptions{})
		k.wantErr(err, mqlite.ErrQueueNotFound, "receive from a deleted topic's subscription queue")
		_, err = k.sendAll("orders", text("y", "", nil))
		k.wantErr(err, mqlite.ErrQueueNotFound, "send to a deleted topic")
	}},
	{"AdminErrorsWriteNothing", func(t *testing.T, h Harness) {
		k := open(t, h)
		tp := k.topic("orders", map[string]mqlite.SubscriptionOptions{"sub": {}})
		k.queue("plain", mqlite.QueueOptions{})
		sub := mqlite.SubscriptionOptions{Queue: mqlite.QueueOptions{LockDuration: lease}}
		for _, tc := range []struct {
			name string
			call func() error
			want error
		}{
			{"bad topic name", func() error { return tp.CreateTopic(k.ctx, "bad name") }, mqlite.ErrInvalidTopicName},
			{"topic over a queue", func() error { return tp.CreateTopic(k.ctx, "plain") }, mqlite.ErrTopicExists},
			{"topic twice", func() error { return tp.CreateTopic(k.ctx, "orders") }, mqlite.ErrTopicExists},
			{"queue over a topic", func() error {
				return k.st.CreateQueue(k.ctx, "orders", mqlite.QueueOptions{LockDuration: lease})
			}, mqlite.ErrQueueExists},
			{"subscription of no topic", func() error { return tp.CreateSubscription(k.ctx, "nope", "q2", sub) }, mqlite.ErrTopicNotFound},
			{"subscription over a queue", func() error { return tp.CreateSubscription(k.ctx, "orders", "plain", sub) }, mqlite.ErrQueueExists},
			{"match with neither In nor Prefix", func() error {
				bad := sub
				bad.Filter = mqlite.Filter{Properties: map[string]mqlite.Match{"k": {}}}
				return tp.CreateSubscription(k.ctx, "orders", "q3", bad)
			}, mqlite.ErrInvalidFilter},
			{"update a missing subscription", func() error {
				return tp.UpdateSubscription(k.ctx, "orders", "plain", mqlite.Filter{})
			}, mqlite.ErrSubscriptionNotFound},
			{"delete a missing subscription", func() error { return tp.DeleteSubscription(k.ctx, "orders", "plain") }, mqlite.ErrSubscriptionNotFound},
			{"get a missing topic", func() error { _, err := tp.GetTopic(k.ctx, "nope"); return err }, mqlite.ErrTopicNotFound},
			{"delete a missing topic", func() error { return tp.DeleteTopic(k.ctx, "nope") }, mqlite.ErrTopicNotFound},
		} {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		topics, err := tp.ListTopics(k.ctx)
		k.must(err, "list topics")
		if len(topics) != 1 || topics[0].Name != "orders" || len(topics[0].Subscriptions) != 1 || topics[0].Subscriptions[0].Queue != "sub" {
			t.Fatalf("after the refused calls: %+v, want orders with sub alone", topics)
		}
		_, err = k.st.Receive(k.ctx, "q3", mqlite.ReceiveOptions{})
		k.wantErr(err, mqlite.ErrQueueNotFound, "the refused subscription's queue")
	}},
}
