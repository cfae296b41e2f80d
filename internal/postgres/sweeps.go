package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// Reap is not built yet.
func (PostgreSQL) Reap(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	return 0, errNotBuilt
}

// Promote is not built yet.
func (PostgreSQL) Promote(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	return 0, errNotBuilt
}

// Expire is not built yet.
func (PostgreSQL) Expire(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	return 0, errNotBuilt
}

// Janitor is not built yet.
func (PostgreSQL) Janitor(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	return 0, errNotBuilt
}

// CompactReceipts is not built yet.
func (PostgreSQL) CompactReceipts(ctx context.Context, tx driver.DBTX, now int64) (int64, error) {
	return 0, errNotBuilt
}
