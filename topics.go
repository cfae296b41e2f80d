package mqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// Limits on a subscription Filter.
const (
	MaxFilterProperties = 32  // conditions on properties
	MaxFilterValues     = 256 // values of one Match's In
)

// Filter picks the messages of a topic a subscription receives: every
// condition that is set must hold. The zero Filter takes every message.
type Filter struct {
	// Subject, when set, must equal the message's Subject.
	Subject string `json:"subject,omitempty"`
	// SubjectPrefix, when set, must begin the message's Subject.
	SubjectPrefix string `json:"subject_prefix,omitempty"`
	// Properties are conditions on the message's Properties, by key. A
	// message without the key does not match, not even In(""): a missing
	// property is not an empty one (a property set to "" matches In("")).
	Properties map[string]Match `json:"properties,omitempty"`
}

// Match is one condition on a property: its value is one of In (one value
// is equality), or begins with Prefix. Exactly one of the two is set.
type Match struct {
	In     []string `json:"in,omitempty"`
	Prefix string   `json:"prefix,omitempty"`
}

// In returns the Match of a property whose value is one of values.
func In(values ...string) Match { return Match{In: values} }

// Prefix returns the Match of a property whose value begins with p.
func Prefix(p string) Match { return Match{Prefix: p} }

func (f Filter) validate() error {
	if len(f.Properties) > MaxFilterProperties {
		return invalidf(ErrInvalidFilter, "%d property conditions, at most %d", len(f.Properties), MaxFilterProperties)
	}
	for key, m := range f.Properties {
		switch {
		case key == "":
			return invalidf(ErrInvalidFilter, "a condition on an empty property key")
		case (len(m.In) > 0) == (m.Prefix != ""):
			return invalidf(ErrInvalidFilter, "property %q: set exactly one of In and Prefix", key)
		case len(m.In) > MaxFilterValues:
			return invalidf(ErrInvalidFilter, "property %q: %d values, at most %d", key, len(m.In), MaxFilterValues)
		}
	}
	return nil
}

func (f Filter) toEngine() driver.Filter {
	out := driver.Filter{Subject: f.Subject, SubjectPrefix: f.SubjectPrefix}
	if len(f.Properties) > 0 {
		out.Properties = make(map[string]driver.Match, len(f.Properties))
		for k, m := range f.Properties {
			out.Properties[k] = driver.Match{In: m.In, Prefix: m.Prefix}
		}
	}
	return out
}

func filterOf(f driver.Filter) Filter {
	out := Filter{Subject: f.Subject, SubjectPrefix: f.SubjectPrefix}
	if len(f.Properties) > 0 {
		out.Properties = make(map[string]Match, len(f.Properties))
		for k, m := range f.Properties {
			out.Properties[k] = Match{In: m.In, Prefix: m.Prefix}
		}
	}
	return out
}

// TopicInfo describes a topic and its subscriptions.
type TopicInfo struct {
	Name          string
	CreatedAt     time.Time
	Subscriptions []SubscriptionInfo
}

// SubscriptionInfo describes one subscription: the queue that gets a copy
// of each message of Topic that passes Filter.
type SubscriptionInfo struct {
	Topic     string
	Queue     string
	Filter    Filter
	CreatedAt time.Time
}

func topicInfo(t driver.Topic) TopicInfo {
	out := TopicInfo{Name: t.Name, CreatedAt: fromMillis(t.CreatedAt)}
	for _, sub := range t.Subscriptions {
		out.Subscriptions = append(out.Subscriptions, SubscriptionInfo{
			Topic: sub.Topic, Queue: sub.Queue, Filter: filterOf(sub.Filter), CreatedAt: fromMillis(sub.CreatedAt)})
	}
	return out
}

// CreateTopic creates the topic name. A topic fans each message sent to it
// (outbox.SendOne and SendBatch take a topic's name wherever they take a
// queue's) out to its subscriptions. Topics and queues share one namespace:
// a name in use by either is ErrTopicExists; a bad name is
// ErrInvalidTopicName.
func (s *Store) CreateTopic(ctx context.Context, name string) error {
	if err := validateName(ErrInvalidTopicName, name); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.eng.CreateTopic(ctx, tx, name, s.now())
	})
}

// DeleteTopic removes a topic and every subscription of it, each with its
// queue and everything in it.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if err := validateName(ErrInvalidTopicName, name); err != nil {
		return err
	}
	t, err := s.GetTopic(ctx, name)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.DeleteTopic(ctx, tx, name) })
	for _, sub := range t.Subscriptions {
		s.queues.forget(sub.Queue)
	}
	return err
}

// GetTopic returns one topic with its subscriptions, or ErrTopicNotFound.
func (s *Store) GetTopic(ctx context.Context, name string) (TopicInfo, error) {
	if err := validateName(ErrInvalidTopicName, name); err != nil {
		return TopicInfo{}, err
	}
	var t driver.Topic
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		t, err = s.eng.GetTopic(ctx, tx, name)
		return err
	})
	return topicInfo(t), err
}

// ListTopics returns every topic, with its subscriptions, in name order.
func (s *Store) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	var ts []driver.Topic
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ts, err = s.eng.ListTopics(ctx, tx)
		return err
	})
	out := make([]TopicInfo, len(ts))
	for i, t := range ts {
		out[i] = topicInfo(t)
	}
	return out, err
}

// SubscriptionOptions configures a subscription.
type SubscriptionOptions struct {
	// Filter picks the messages the subscription receives; the zero value
	// takes all of them.
	Filter Filter
	// Queue configures the subscription's queue, as CreateQueue's opts.
	Queue QueueOptions
}

// CreateSubscription subscribes a new queue, named queue and configured by
// opts.Queue, to topic: from now on each message sent to the topic that
// passes opts.Filter is written to the queue, in the sender's transaction.
// Messages sent before are not. The queue is an ordinary queue (receive,
// settle, dead letters, FIFO groups all apply). Errors: ErrTopicNotFound,
// ErrQueueExists, ErrInvalidFilter and the errors of CreateQueue.
func (s *Store) CreateSubscription(ctx context.Context, topic, queue string, opts SubscriptionOptions) error {
	if err := validateName(ErrInvalidTopicName, topic); err != nil {
		return err
	}
	if err := opts.Filter.validate(); err != nil {
		return err
	}
	q, err := resolveQueue(queue, opts.Queue)
	if err != nil {
		return err
	}
	defer s.queues.forget(queue)
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.eng.CreateSubscription(ctx, tx, topic, q, opts.Filter.toEngine(), s.now())
	})
}

// UpdateSubscription replaces the filter of a subscription; the next send
// uses it. A missing one is ErrSubscriptionNotFound.
func (s *Store) UpdateSubscription(ctx context.Context, topic, queue string, f Filter) error {
	if err := validateName(ErrInvalidTopicName, topic); err != nil {
		return err
	}
	if err := validateQueueName(queue); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.eng.UpdateSubscription(ctx, tx, topic, queue, f.toEngine())
	})
}

// DeleteSubscription removes a subscription and its queue with everything
// in it. The topic's other subscriptions are untouched.
func (s *Store) DeleteSubscription(ctx context.Context, topic, queue string) error {
	if err := validateName(ErrInvalidTopicName, topic); err != nil {
		return err
	}
	if err := validateQueueName(queue); err != nil {
		return err
	}
	defer s.queues.forget(queue)
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.eng.DeleteSubscription(ctx, tx, topic, queue)
	})
}
