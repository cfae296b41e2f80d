package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// PeekDeadLetters is not built yet.
func (PostgreSQL) PeekDeadLetters(ctx context.Context, db driver.DBTX, r driver.PeekRequest) ([]driver.Row, error) {
	return nil, errNotBuilt
}

// Redrive is not built yet.
func (PostgreSQL) Redrive(ctx context.Context, db driver.DBTX, queue string, seqs []int64, now int64) (int64, error) {
	return 0, errNotBuilt
}

// DeliverNow is not built yet.
func (PostgreSQL) DeliverNow(ctx context.Context, db driver.DBTX, queue string, seqs []int64, now int64) (int64, error) {
	return 0, errNotBuilt
}

// PurgeBatch is not built yet.
func (PostgreSQL) PurgeBatch(ctx context.Context, db driver.DBTX, queue, state string) (int64, error) {
	return 0, errNotBuilt
}

// PurgeSeqs is not built yet.
func (PostgreSQL) PurgeSeqs(ctx context.Context, db driver.DBTX, queue, state string, seqs []int64) (int64, error) {
	return 0, errNotBuilt
}

// Retain is not built yet.
func (PostgreSQL) Retain(ctx context.Context, db driver.DBTX, q driver.Queue, now int64, stop func() bool) (int64, error) {
	return 0, errNotBuilt
}
