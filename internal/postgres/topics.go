package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// CreateTopic inserts the topic name; a name in use by a queue or a topic
// is errs.ErrTopicExists, also when another transaction creates it at the
// same moment, at any isolation (claimName).
func (PostgreSQL) CreateTopic(ctx context.Context, db driver.DBTX, name string, now int64) error {
	return inTx(ctx, db, func(tx driver.DBTX) error {
		if err := claimName(ctx, tx, name, "topic", errs.ErrTopicExists); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO mqlite_topics (name, created_at) VALUES ($1, $2)
			ON CONFLICT (name) DO NOTHING`, name, now)
		if uniqueViolation(err) {
			return fmt.Errorf("%w: %q is a queue or a topic", errs.ErrTopicExists, name)
		}
		if err != nil {
			return fmt.Errorf("create topic: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %q is a queue or a topic", errs.ErrTopicExists, name)
		}
		return nil
	})
}

// DeleteTopic removes a topic and its subscriptions, each with its queue.
// It locks the topic's row first (FOR UPDATE): a subscription being
// created in another process holds the row's key-share lock until it
// commits, so the delete reads it and takes it along; one created after
// waits and then finds no topic.
func (PostgreSQL) DeleteTopic(ctx context.Context, db driver.DBTX, name string) error {
	return inTx(ctx, db, func(tx driver.DBTX) error {
		if _, err := topicRow(ctx, tx, name, " FOR UPDATE"); err != nil {
			return err
		}
		subs, err := subscriptions(ctx, tx, name)
		if err != nil {
			return err
		}
		for _, sub := range subs {
			if err := deleteSubscription(ctx, tx, name, sub.Queue); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM mqlite_topics WHERE name = $1`, name); err != nil {
			return fmt.Errorf("delete topic: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM mqlite_names WHERE name = $1 AND kind = 'topic'`, name); err != nil {
			return fmt.Errorf("delete topic: %w", err)
		}
		return nil
	})
}

// topicRow reads the creation moment of the topic name, with lock (a
// locking clause or "") on its row; a missing one is errs.ErrTopicNotFound.
func topicRow(ctx context.Context, db driver.DBTX, name, lock string) (int64, error) {
	var at int64
	err := db.QueryRowContext(ctx, `SELECT created_at FROM mqlite_topics WHERE name = $1`+lock, name).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", errs.ErrTopicNotFound, name)
	}
	if err != nil {
		return 0, fmt.Errorf("get topic: %w", err)
	}
	return at, nil
}

// GetTopic reads one topic with its subscriptions; a missing one is
// errs.ErrTopicNotFound.
func (PostgreSQL) GetTopic(ctx context.Context, db driver.DBTX, name string) (driver.Topic, error) {
	at, err := topicRow(ctx, db, name, "")
	if err != nil {
		return driver.Topic{}, err
	}
	t := driver.Topic{Name: name, CreatedAt: at}
	t.Subscriptions, err = subscriptions(ctx, db, name)
	return t, err
}

// ListTopics returns every topic, with its subscriptions, in name order.
func (PostgreSQL) ListTopics(ctx context.Context, db driver.DBTX) ([]driver.Topic, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, created_at FROM mqlite_topics ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return driver.ReadTopics(rows, func(topic string) ([]driver.Subscription, error) {
		return subscriptions(ctx, db, topic)
	})
}

// subscriptions reads the subscriptions of topic in queue order.
func subscriptions(ctx context.Context, db driver.DBTX, topic string) ([]driver.Subscription, error) {
	rows, err := db.QueryContext(ctx, `SELECT queue, filter, created_at FROM mqlite_subscriptions
		WHERE topic = $1 ORDER BY queue`, topic)
	if err != nil {
		return nil, fmt.Errorf("subscriptions of %s: %w", topic, err)
	}
	return driver.ReadSubscriptions(rows, topic)
}

// CreateSubscription creates the queue q and subscribes it to topic with
// filter; an unknown topic is errs.ErrTopicNotFound, a name in use
// errs.ErrQueueExists. It holds the topic's row (FOR KEY SHARE, what the
// subscription's foreign key takes anyway) from the start, so a delete of
// the topic in another process waits for it or comes first.
func (PostgreSQL) CreateSubscription(ctx context.Context, db driver.DBTX, topic string, q driver.Queue, f driver.Filter, now int64) error {
	return inTx(ctx, db, func(tx driver.DBTX) error {
		if _, err := topicRow(ctx, tx, topic, " FOR KEY SHARE"); err != nil {
			return err
		}
		if err := createQueue(ctx, tx, q, now); err != nil {
			return err
		}
		blob, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("create subscription: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO mqlite_subscriptions (topic, queue, filter, created_at)
			VALUES ($1, $2, $3, $4)`, topic, q.Name, string(blob), now); err != nil {
			return fmt.Errorf("create subscription: %w", err)
		}
		return nil
	})
}

// UpdateSubscription replaces the filter of a subscription; a missing one
// is errs.ErrSubscriptionNotFound.
func (PostgreSQL) UpdateSubscription(ctx context.Context, db driver.DBTX, topic, queue string, f driver.Filter) error {
	blob, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("update subscription: %w", err)
	}
	res, err := db.ExecContext(ctx, `UPDATE mqlite_subscriptions SET filter = $1 WHERE topic = $2 AND queue = $3`,
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
// in it; the topic's other subscriptions are untouched. Of two processes
// deleting it at once, the second waits on the row and finds it gone.
func (PostgreSQL) DeleteSubscription(ctx context.Context, db driver.DBTX, topic, queue string) error {
	return inTx(ctx, db, func(tx driver.DBTX) error { return deleteSubscription(ctx, tx, topic, queue) })
}

// deleteSubscription is DeleteSubscription in tx.
func deleteSubscription(ctx context.Context, tx driver.DBTX, topic, queue string) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM mqlite_subscriptions WHERE topic = $1 AND queue = $2`, topic, queue)
	if err != nil {
		return fmt.Errorf("delete subscription: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s/%s", errs.ErrSubscriptionNotFound, topic, queue)
	}
	return deleteQueue(ctx, tx, queue)
}
