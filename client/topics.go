package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

func tpath(topic, rest string) string { return "/v1/topics/" + url.PathEscape(topic) + rest }

// CreateTopic creates a topic, as Store.CreateTopic.
func (c *Client) CreateTopic(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/topics", in: wire.CreateTopicRequest{Name: name}})
}

// GetTopic returns a topic with its subscriptions, as Store.GetTopic.
func (c *Client) GetTopic(ctx context.Context, name string) (mqlite.TopicInfo, error) {
	var out wire.Topic
	if err := c.do(ctx, call{method: http.MethodGet, path: tpath(name, ""), out: &out}); err != nil {
		return mqlite.TopicInfo{}, err
	}
	return out.TopicInfo(), nil
}

// ListTopics returns the topics the key covers, in name order.
func (c *Client) ListTopics(ctx context.Context) ([]mqlite.TopicInfo, error) {
	var out wire.TopicsResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/topics", out: &out}); err != nil {
		return nil, err
	}
	res := make([]mqlite.TopicInfo, len(out.Topics))
	for i, t := range out.Topics {
		res[i] = t.TopicInfo()
	}
	return res, nil
}

// DeleteTopic removes a topic and its subscriptions, as Store.DeleteTopic.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: tpath(name, "")})
}

// CreateSubscription subscribes a new queue to topic, as
// Store.CreateSubscription.
func (c *Client) CreateSubscription(ctx context.Context, topic, queue string, opts mqlite.SubscriptionOptions) error {
	return c.do(ctx, call{method: http.MethodPost, path: tpath(topic, "/subscriptions"),
		in: wire.CreateSubscriptionRequest{Queue: queue, Filter: opts.Filter, Options: wire.FromQueueOptions(opts.Queue)}})
}

// UpdateSubscription replaces a subscription's filter, as
// Store.UpdateSubscription.
func (c *Client) UpdateSubscription(ctx context.Context, topic, queue string, f mqlite.Filter) error {
	return c.do(ctx, call{method: http.MethodPut, path: tpath(topic, "/subscriptions/"+url.PathEscape(queue)),
		in: wire.UpdateSubscriptionRequest{Filter: f}})
}

// DeleteSubscription removes a subscription and its queue, as
// Store.DeleteSubscription.
func (c *Client) DeleteSubscription(ctx context.Context, topic, queue string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: tpath(topic, "/subscriptions/"+url.PathEscape(queue))})
}
