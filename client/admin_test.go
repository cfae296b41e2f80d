package client_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestErrorsMatchRootSentinels: an error of the store crosses the network
// and still matches its sentinel with errors.Is.
func TestErrorsMatchRootSentinels(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	c := b.src
	_, err := c.Send(ctx, "q", outbox.Message{Body: []byte("a"), MessageID: "id"})
	must(t, err)
	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"duplicate conflict", func() error {
			_, err := c.Send(ctx, "q", outbox.Message{Body: []byte("b"), MessageID: "id"})
			return err
		}(), []error{mqlite.ErrDuplicateConflict}},
		{"queue not found", func() error { _, err := c.Receive(ctx, "nope", mqlite.ReceiveOptions{}); return err }(), []error{mqlite.ErrQueueNotFound}},
		{"queue exists", c.CreateQueue(ctx, "q", mqlite.QueueOptions{}), []error{mqlite.ErrQueueExists}},
		{"invalid lock duration", c.CreateQueue(ctx, "r", mqlite.QueueOptions{LockDuration: time.Millisecond}),
			[]error{mqlite.ErrInvalidLockDuration, mqlite.ErrInvalidArgument}},
		{"invalid queue name", c.CreateQueue(ctx, "bad name", mqlite.QueueOptions{}), []error{mqlite.ErrInvalidQueueName, mqlite.ErrInvalidArgument}},
		{"attempt conflict", func() error {
			if _, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1, AttemptID: "x"}); err != nil {
				return err
			}
			_, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 2, AttemptID: "x"})
			return err
		}(), []error{mqlite.ErrAttemptConflict}},
		{"too large", func() error {
			_, err := c.Send(ctx, "q", outbox.Message{Body: make([]byte, mqlite.DefaultMaxMessageBytes+1)})
			return err
		}(), []error{mqlite.ErrMessageTooLarge}},
		{"topic not found", c.CreateSubscription(ctx, "nope", "s", mqlite.SubscriptionOptions{}), []error{mqlite.ErrTopicNotFound}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !errors.Is(tc.err, w) {
					t.Errorf("got %v, want it to match %v", tc.err, w)
				}
			}
			var ce *client.Error
			if !errors.As(tc.err, &ce) && !errors.Is(tc.err, mqlite.ErrInvalidArgument) {
				t.Errorf("%v is not a *client.Error", tc.err)
			}
		})
	}
}

// TestTopicsAndAdminOverClient: topics fan out through the broker; queue
// administration, dead letters, stats and keys work through the client.
func TestTopicsAndAdminOverClient(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	c := b.src
	must(t, c.CreateTopic(ctx, "events"))
	must(t, c.CreateSubscription(ctx, "events", "mailer", mqlite.SubscriptionOptions{Filter: mqlite.Filter{SubjectPrefix: "order."}}))
	must(t, c.CreateSubscription(ctx, "events", "ledger", mqlite.SubscriptionOptions{
		Filter: mqlite.Filter{Properties: map[string]mqlite.Match{"kind": mqlite.In("paid")}}}))
	res, err := c.Send(ctx, "events", outbox.Message{Body: []byte("e"), Subject: "order.paid", Properties: map[string]string{"kind": "paid"}})
	must(t, err)
	if len(res.Copies) != 2 || res.Copies[0].Queue != "ledger" || res.Copies[1].Queue != "mailer" {
		t.Fatalf("copies %+v", res.Copies)
	}
	res, err = c.Send(ctx, "events", outbox.Message{Body: []byte("f"), Subject: "user.new"})
	must(t, err)
	if len(res.Copies) != 0 || res.Seq != 0 {
		t.Fatalf("no subscription matches, got %+v", res)
	}
	must(t, c.UpdateSubscription(ctx, "events", "mailer", mqlite.Filter{}))
	top, err := c.GetTopic(ctx, "events")
	must(t, err)
	if len(top.Subscriptions) != 2 || top.Subscriptions[1].Filter.SubjectPrefix != "" {
		t.Fatalf("topic %+v", top)
	}
	tops, err := c.ListTopics(ctx)
	must(t, err)
	if len(tops) != 1 {
		t.Fatalf("topics %+v", tops)
	}

	must(t, c.UpdateQueue(ctx, "q", mqlite.QueueOptions{MaxDeliveryCount: 1, LockDuration: lease}))
	info, err := c.GetQueue(ctx, "q")
	must(t, err)
	if info.Options.MaxDeliveryCount != 1 || info.Options.LockDuration != lease || info.Options.DedupWindow != mqlite.DefaultDedupWindow {
		t.Fatalf("queue %+v", info)
	}
	qs, err := c.ListQueues(ctx)
	must(t, err)
	if len(qs) != 3 {
		t.Fatalf("queues %+v", qs)
	}
	b.Send(t, "q", outbox.Message{}, outbox.Message{})
	for range 2 {
		m := b.receive(t, mqlite.ReceiveOptions{})
		must(t, c.Reject(ctx, m[0].Lock(), "bad", ""))
	}
	st, err := c.Stats(ctx, "q")
	must(t, err)
	if st.DeadLettered != 2 || st.Total() != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Purge one selected dead letter, then redrive the other.
	dead, err := c.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	n, err := c.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateDeadLettered, Seqs: []int64{dead[0].Seq}})
	must(t, err)
	if n != 1 {
		t.Fatalf("purged %d selected dead letters, want 1", n)
	}
	n, err = c.Redrive(ctx, "q", mqlite.RedriveOptions{})
	must(t, err)
	if n != 1 {
		t.Fatalf("redrove %d", n)
	}
	n, err = c.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateActive})
	must(t, err)
	if n != 1 {
		t.Fatalf("purged %d", n)
	}
	must(t, c.DeleteSubscription(ctx, "events", "ledger"))
	must(t, c.DeleteTopic(ctx, "events"))
	must(t, c.DeleteQueue(ctx, "q"))
	if _, err := c.GetQueue(ctx, "q"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("deleted queue: %v", err)
	}
}

// TestKeysOverClient: a key made through the broker works at once, is
// limited to its role and queues, and stops working when revoked.
func TestKeysOverClient(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	url, admin := serve(t, tb, broker.Config{})
	ac := newClient(t, url, admin, tb.Clock)
	k, secret, err := ac.CreateKey(ctx, "producer", []string{"q"})
	must(t, err)
	if k.ID == "" || secret == "" {
		t.Fatalf("key %+v", k)
	}
	pc := newClient(t, url, secret, tb.Clock)
	me, queues, err := pc.WhoAmI(ctx)
	must(t, err)
	if me.ID != k.ID || me.Role != "producer" || !slices.Equal(queues, []string{"q"}) {
		t.Fatalf("WhoAmI: %+v %v, want the producer key over q", me, queues)
	}
	_, err = pc.Send(ctx, "q", outbox.Message{Body: []byte("x")})
	must(t, err)
	if _, err := pc.Receive(ctx, "q", mqlite.ReceiveOptions{}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("producer receives: %v", err)
	}
	ks, err := ac.ListKeys(ctx)
	must(t, err)
	if len(ks) != 2 {
		t.Fatalf("keys %+v", ks)
	}
	must(t, ac.RevokeKey(ctx, k.ID))
	if _, err := pc.Send(ctx, "q", outbox.Message{Body: []byte("y")}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("revoked key: %v", err)
	}
	if _, _, err := pc.WhoAmI(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("WhoAmI with a revoked key: %v", err)
	}
}

// TestCountsOverClient: Counts answers every queue the key covers, and only
// those, with the counts per state Stats reads and the counters since Open.
func TestCountsOverClient(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	tb.Queue(t, "other", mqlite.QueueOptions{})
	url, admin := serve(t, tb, broker.Config{})
	ac := newClient(t, url, admin, tb.Clock)
	for _, queue := range []string{"q", "q", "q", "other"} {
		_, err := ac.Send(ctx, queue, outbox.Message{Body: []byte(fmt.Sprint(queue, rand.Int()))})
		must(t, err)
	}
	_, err := ac.Receive(ctx, "q", mqlite.ReceiveOptions{})
	must(t, err)
	_, secret, err := ac.CreateKey(ctx, "consumer", []string{"q"})
	must(t, err)
	got, err := newClient(t, url, secret, tb.Clock).Counts(ctx)
	must(t, err)
	st, err := tb.Store.Stats(ctx, "q")
	must(t, err)
	if len(got) != 1 || got[0].Queue != "q" || got[0].Active != st.Active || got[0].Locked != st.Locked ||
		got[0].Active != 2 || got[0].Locked != 1 || got[0].Counters.Sent != 3 || got[0].Counters.Received != 1 {
		t.Fatalf("Counts with a key over q: %+v; Stats %+v", got, st)
	}
	all, err := ac.Counts(ctx)
	must(t, err)
	if len(all) != 2 || all[0].Queue != "other" || all[1].Queue != "q" {
		t.Fatalf("Counts with an admin key: %+v, want other and q", all)
	}
	// What the broker adds to the counts crosses too: the bytes, the
	// oldest age, the pause and the receiver with its lock.
	must(t, ac.PauseQueue(ctx, "q"))
	tb.Clock.Advance(time.Second) // within the lease and the receivers' grace
	all, err = ac.Counts(ctx)
	must(t, err)
	if q := all[1]; !q.Paused || q.Bytes == 0 || q.OldestAge < time.Second || q.Consumers != 1 || q.Locks != 1 {
		t.Fatalf("Counts after a pause, a second on: %+v, want paused, bytes, age, 1 consumer with 1 lock", q)
	}
}

// TestFindOverClient: the client's Find is the store's, through the broker.
func TestFindOverClient(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seqs := b.Send(t, "q", outbox.Message{Subject: "order.placed", Properties: map[string]string{"tenant": "a"}},
		outbox.Message{Subject: "invoice.sent"})
	res, err := b.src.Find(ctx, "q", mqlite.FindParams{SubjectPrefix: "order.", PropertyKey: "tenant", PropertyValue: "a"})
	must(t, err)
	if len(res.Messages) != 1 || res.Messages[0].Seq != seqs[0] || res.NextSeq != 0 || res.Scanned != 2 {
		t.Fatalf("find: %+v", res)
	}
	if _, err := b.src.Find(ctx, "q", mqlite.FindParams{State: "gone"}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("bad state: %v", err)
	}
}
