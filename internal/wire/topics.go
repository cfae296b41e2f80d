package wire

import (
	"time"

	"github.com/mqlite/mqlite"
)

// CreateTopicRequest is the body of a topic creation.
type CreateTopicRequest struct {
	Name string `json:"name"`
}

// CreateSubscriptionRequest is the body of a subscription creation: the
// subscription's queue, its filter and the queue's options.
type CreateSubscriptionRequest struct {
	Queue   string        `json:"queue"`
	Filter  mqlite.Filter `json:"filter,omitzero"`
	Options QueueOptions  `json:"options,omitzero"`
}

// UpdateSubscriptionRequest is the body of a subscription update: the new
// filter.
type UpdateSubscriptionRequest struct {
	Filter mqlite.Filter `json:"filter"`
}

// Subscription is mqlite.SubscriptionInfo on the wire.
type Subscription struct {
	Topic     string        `json:"topic"`
	Queue     string        `json:"queue"`
	Filter    mqlite.Filter `json:"filter"`
	CreatedAt time.Time     `json:"created_at"`
}

// Topic is mqlite.TopicInfo on the wire.
type Topic struct {
	Name          string         `json:"name"`
	CreatedAt     time.Time      `json:"created_at"`
	Subscriptions []Subscription `json:"subscriptions"`
}

// FromTopic encodes t.
func FromTopic(t mqlite.TopicInfo) Topic {
	out := Topic{Name: t.Name, CreatedAt: t.CreatedAt, Subscriptions: make([]Subscription, len(t.Subscriptions))}
	for i, s := range t.Subscriptions {
		out.Subscriptions[i] = Subscription{Topic: s.Topic, Queue: s.Queue, Filter: s.Filter, CreatedAt: s.CreatedAt}
	}
	return out
}

// TopicInfo decodes t.
func (t Topic) TopicInfo() mqlite.TopicInfo {
	out := mqlite.TopicInfo{Name: t.Name, CreatedAt: t.CreatedAt}
	for _, s := range t.Subscriptions {
		out.Subscriptions = append(out.Subscriptions, mqlite.SubscriptionInfo{Topic: s.Topic, Queue: s.Queue, Filter: s.Filter, CreatedAt: s.CreatedAt})
	}
	return out
}

// TopicsResponse is the response of the topic listing.
type TopicsResponse struct {
	Topics []Topic `json:"topics"`
}
