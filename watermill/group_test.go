package watermill_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	mqwatermill "github.com/mqlite/mqlite/watermill"
)

// The broker's client can create topics as the Store can.
var _ mqwatermill.TopicCreator = (*client.Client)(nil)

// groupSubscriber subscribes to topic as a member of group, creating the
// topic and the group's subscription.
func groupSubscriber(t *testing.T, st *mqlite.Store, topic, group string) <-chan *message.Message {
	t.Helper()
	sub, err := mqwatermill.NewSubscriber(st, mqwatermill.SubscriberConfig{
		ConsumerGroup: group, AutoCreateQueues: true, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestConsumerGroupsFanOutAndCompete: every group gets each message once;
// the members of one group share their group's copies, none twice.
func TestConsumerGroupsFanOutAndCompete(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	billing1 := groupSubscriber(t, b.st, "orders", "billing")
	billing2 := groupSubscriber(t, b.st, "orders", "billing")
	audit := groupSubscriber(t, b.st, "orders", "audit")

	ids := []string{"o1", "o2", "o3", "o4", "o5", "o6"}
	b.queue = "orders"
	b.publish(t, ids...)

	var auditGot []string
	for range ids {
		m := next(t, audit)
		auditGot = append(auditGot, m.UUID)
		m.Ack()
	}
	// The two billing members: collect until the group has every message,
	// acking each, so a member that holds one takes the next.
	var billingGot []string
	for len(billingGot) < len(ids) {
		select {
		case m := <-billing1:
			billingGot = append(billingGot, m.UUID)
			m.Ack()
		case m := <-billing2:
			billingGot = append(billingGot, m.UUID)
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("billing got %v, want %v", billingGot, ids)
		}
	}
	for name, got := range map[string][]string{"audit": auditGot, "billing": billingGot} {
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("%s got %v, want each of %v once", name, got, ids)
		}
	}
}

// queueOnly is a Store that can create queues and not topics.
type queueOnly struct {
	consumer.Store
	mqwatermill.QueueCreator
}

// TestConsumerGroupErrors: a group over a name that is a queue, over a
// queue that is not the topic's subscription, without auto-creation, or on
// a Store that cannot create topics, is a typed error that takes nothing
// over.
func TestConsumerGroupErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{}) // the queue "events"
	ctx := context.Background()
	if err := b.st.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := b.st.CreateQueue(ctx, "orders:squatter", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	newSub := func(src consumer.Store, group string, auto bool) (*mqwatermill.Subscriber, error) {
		return mqwatermill.NewSubscriber(src, mqwatermill.SubscriberConfig{ConsumerGroup: group, AutoCreateQueues: auto, Logger: quiet})
	}
	for _, tc := range []struct {
		name  string
		topic string
		group string
		auto  bool
		want  error
	}{
		{"a queue is not a topic", "events", "g", true, mqlite.ErrTopicNotFound},
		{"a queue that is not the topic's subscription", "orders", "squatter", true, mqlite.ErrQueueExists},
		{"no subscription without auto-creation", "orders", "absent", false, mqlite.ErrQueueNotFound},
		{"a group name that makes a bad queue name", "orders", "bad name", true, mqlite.ErrInvalidQueueName},
	} {
		sub, err := newSub(b.st, tc.group, tc.auto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Subscribe(ctx, tc.topic); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		_ = sub.Close()
	}
	if info, err := b.st.GetTopic(ctx, "orders"); err != nil || len(info.Subscriptions) != 0 {
		t.Fatalf("the refused subscribes left %+v %v, want no subscription", info, err)
	}

	src := queueOnly{Store: b.st, QueueCreator: b.st}
	if _, err := newSub(src, "g", true); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("AutoCreateQueues with a group on a Store without topics: %v, want ErrInvalidArgument", err)
	}
	sub, err := newSub(src, "g", false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("orders"); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("SubscribeInitialize with a group on a Store without topics: %v, want ErrInvalidArgument", err)
	}
}
