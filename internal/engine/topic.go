package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// nameTaken reports whether name is a queue or a topic: the two share one
// namespace, so that a send's target is never ambiguous.
func nameTaken(ctx context.Context, db DBTX, name string) (bool, error) {
	var taken bool
	err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_queues WHERE name = ?1)
		OR EXISTS (SELECT 1 FROM mqlite_topics WHERE name = ?1)`, name).Scan(&taken)
	return taken, err
}

// isTopic reports whether name is a topic.
func isTopic(ctx context.Context, db DBTX, name string) (bool, error) {
	var ok bool
	err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_topics WHERE name = ?)`, name).Scan(&ok)
	if err != nil {
		return false, interpret("send", err)
	}
	return ok, nil
}

// CreateTopic inserts the topic name; a name in use by a queue or a topic
// is errs.ErrTopicExists.
func CreateTopic(ctx context.Context, db DBTX, name string, now int64) error {
	taken, err := nameTaken(ctx, db, name)
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	if taken {
		return fmt.Errorf("%w: %q is a queue or a topic", errs.ErrTopicExists, name)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO mqlite_topics (name, created_at) VALUES (?, ?)`, name, now); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	return nil
}

// DeleteTopic removes a topic and its subscriptions, each with its queue.
func DeleteTopic(ctx context.Context, db DBTX, name string) error {
	t, err := GetTopic(ctx, db, name)
	if err != nil {
		return err
	}
	for _, sub := range t.Subscriptions {
		if err := DeleteSubscription(ctx, db, name, sub.Queue); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM mqlite_topics WHERE name = ?`, name); err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	return nil
}

// GetTopic reads one topic with its subscriptions; a missing one is
// errs.ErrTopicNotFound.
func GetTopic(ctx context.Context, db DBTX, name string) (Topic, error) {
	t := Topic{Name: name}
	err := db.QueryRowContext(ctx, `SELECT created_at FROM mqlite_topics WHERE name = ?`, name).Scan(&t.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return Topic{}, fmt.Errorf("%w: %q", errs.ErrTopicNotFound, name)
	}
	if err != nil {
		return Topic{}, fmt.Errorf("get topic: %w", err)
	}
	t.Subscriptions, err = subscriptions(ctx, db, name)
	return t, err
}

// ListTopics returns every topic, with its subscriptions, in name order.
func ListTopics(ctx context.Context, db DBTX) ([]Topic, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, created_at FROM mqlite_topics ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return driver.ReadTopics(rows, func(topic string) ([]driver.Subscription, error) {
		return subscriptions(ctx, db, topic)
	})
}

// subscriptions reads the subscriptions of topic in queue order.
func subscriptions(ctx context.Context, db DBTX, topic string) ([]Subscription, error) {
	rows, err := db.QueryContext(ctx, `SELECT queue, filter, created_at FROM mqlite_subscriptions
		WHERE topic = ? ORDER BY queue`, topic)
	if err != nil {
		return nil, fmt.Errorf("subscriptions of %s: %w", topic, err)
	}
	return driver.ReadSubscriptions(rows, topic)
}

// CreateSubscription creates the queue q and subscribes it to topic with
// filter; an unknown topic is errs.ErrTopicNotFound, a name in use
// errs.ErrQueueExists.
func CreateSubscription(ctx context.Context, db DBTX, topic string, q Queue, f Filter, now int64) error {
	if _, err := GetTopic(ctx, db, topic); err != nil {
		return err
	}
	if err := CreateQueue(ctx, db, q, now); err != nil {
		return err
	}
	blob, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("create subscription: %w", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO mqlite_subscriptions (topic, queue, filter, created_at)
		VALUES (?, ?, ?, ?)`, topic, q.Name, string(blob), now); err != nil {
		return fmt.Errorf("create subscription: %w", err)
	}
	return nil
}

// UpdateSubscription replaces the filter of a subscription; a missing one
// is errs.ErrSubscriptionNotFound.
func UpdateSubscription(ctx context.Context, db DBTX, topic, queue string, f Filter) error {
	blob, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("update subscription: %w", err)
	}
	res, err := db.ExecContext(ctx, `UPDATE mqlite_subscriptions SET filter = ? WHERE topic = ? AND queue = ?`,
		string(blob), topic, queue)
	if err != nil {
		return fmt.Errorf("update subscription: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s/%s", errs.ErrSubscriptionNotFound, topic, queue)
	}
	return nil
}

// DeleteSubscription removes a subscription and its queue with everything
// in it; the topic's other subscriptions are untouched.
func DeleteSubscription(ctx context.Context, db DBTX, topic, queue string) error {
	res, err := db.ExecContext(ctx, `DELETE FROM mqlite_subscriptions WHERE topic = ? AND queue = ?`, topic, queue)
	if err != nil {
		return fmt.Errorf("delete subscription: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s/%s", errs.ErrSubscriptionNotFound, topic, queue)
	}
	return DeleteQueue(ctx, db, queue)
}

// publish writes one copy of each message into every subscription of the
// topic whose filter it passes, all in db (the caller's transaction): every
// copy commits or none does. A message that no subscription takes writes
// nothing and is not an error (Seq 0, no Copies). Dedup applies per
// subscription queue. A slot's Seq, Duplicate and Err are those of its
// first copy; Copies has each.
func publish(ctx context.Context, db DBTX, topic string, msgs []SendMessage) ([]SendResult, error) {
	subs, err := subscriptions(ctx, db, topic)
	if err != nil {
		return nil, interpret("send", err)
	}
	out := make([]SendResult, len(msgs))
	for i, m := range msgs {
		ckey := contentKey(m.Body) // once for every copy
		for _, sub := range subs {
			if !sub.Filter.Matches(m.Subject, m.Props) {
				continue
			}
			c, err := insert(ctx, db, sub.Queue, m, ckey)
			if err != nil {
				return nil, err
			}
			out[i].Copies = append(out[i].Copies, c)
		}
		if len(out[i].Copies) > 0 {
			first := out[i].Copies[0]
			out[i].Seq, out[i].Duplicate, out[i].Err = first.Seq, first.Duplicate, first.Err
		}
	}
	return out, nil
}
