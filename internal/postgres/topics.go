package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// CreateTopic is not built yet.
func (PostgreSQL) CreateTopic(ctx context.Context, db driver.DBTX, name string, now int64) error {
	return errNotBuilt
}

// DeleteTopic is not built yet.
func (PostgreSQL) DeleteTopic(ctx context.Context, db driver.DBTX, name string) error {
	return errNotBuilt
}

// GetTopic is not built yet.
func (PostgreSQL) GetTopic(ctx context.Context, db driver.DBTX, name string) (driver.Topic, error) {
	return driver.Topic{}, errNotBuilt
}

// ListTopics is not built yet.
func (PostgreSQL) ListTopics(ctx context.Context, db driver.DBTX) ([]driver.Topic, error) {
	return nil, errNotBuilt
}

// CreateSubscription is not built yet.
func (PostgreSQL) CreateSubscription(ctx context.Context, db driver.DBTX, topic string, q driver.Queue, f driver.Filter, now int64) error {
	return errNotBuilt
}

// UpdateSubscription is not built yet.
func (PostgreSQL) UpdateSubscription(ctx context.Context, db driver.DBTX, topic, queue string, f driver.Filter) error {
	return errNotBuilt
}

// DeleteSubscription is not built yet.
func (PostgreSQL) DeleteSubscription(ctx context.Context, db driver.DBTX, topic, queue string) error {
	return errNotBuilt
}
