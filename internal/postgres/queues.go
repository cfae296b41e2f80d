package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// CreateQueue is not built yet.
func (PostgreSQL) CreateQueue(ctx context.Context, db driver.DBTX, q driver.Queue, now int64) error {
	return errNotBuilt
}

// UpdateQueue is not built yet.
func (PostgreSQL) UpdateQueue(ctx context.Context, db driver.DBTX, q driver.Queue, now int64) error {
	return errNotBuilt
}

// SetPaused is not built yet.
func (PostgreSQL) SetPaused(ctx context.Context, db driver.DBTX, name string, at int64) error {
	return errNotBuilt
}

// DeleteQueue is not built yet.
func (PostgreSQL) DeleteQueue(ctx context.Context, db driver.DBTX, name string) error {
	return errNotBuilt
}

// GetQueue is not built yet.
func (PostgreSQL) GetQueue(ctx context.Context, db driver.DBTX, name string) (driver.Queue, error) {
	return driver.Queue{}, errNotBuilt
}

// ListQueues is not built yet.
func (PostgreSQL) ListQueues(ctx context.Context, db driver.DBTX) ([]driver.Queue, error) {
	return nil, errNotBuilt
}
