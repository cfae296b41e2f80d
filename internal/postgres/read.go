package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// Peek is not built yet.
func (PostgreSQL) Peek(ctx context.Context, db driver.DBTX, r driver.PeekRequest) ([]driver.Row, error) {
	return nil, errNotBuilt
}

// Find is not built yet.
func (PostgreSQL) Find(ctx context.Context, db driver.DBTX, r driver.FindRequest) (driver.FindResult, error) {
	return driver.FindResult{}, errNotBuilt
}

// Stats is not built yet.
func (PostgreSQL) Stats(ctx context.Context, db driver.DBTX, queue string) (map[string]driver.StateStats, error) {
	return nil, errNotBuilt
}

// Oldest is not built yet.
func (PostgreSQL) Oldest(ctx context.Context, db driver.DBTX, queue string) (activeEnq, deadAt int64, err error) {
	return 0, 0, errNotBuilt
}

// Busy is not built yet.
func (PostgreSQL) Busy(ctx context.Context, db driver.DBTX, queues []string) (int64, error) {
	return 0, errNotBuilt
}
