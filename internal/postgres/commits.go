package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// LookupCommit is not built yet.
func (PostgreSQL) LookupCommit(ctx context.Context, tx driver.DBTX, scope, key string) (rec driver.CommitRecord, found bool, err error) {
	return driver.CommitRecord{}, false, errNotBuilt
}

// RecordCommit is not built yet.
func (PostgreSQL) RecordCommit(ctx context.Context, tx driver.DBTX, scope, key string, rec driver.CommitRecord) error {
	return errNotBuilt
}

// TrimCommits is not built yet.
func (PostgreSQL) TrimCommits(ctx context.Context, tx driver.DBTX, scope string, keep int) (int, error) {
	return 0, errNotBuilt
}

// LookupDedup is not built yet.
func (PostgreSQL) LookupDedup(ctx context.Context, db driver.DBTX, queue, messageID string) (driver.DedupEntry, error) {
	return driver.DedupEntry{}, errNotBuilt
}

// ForgetDedup is not built yet.
func (PostgreSQL) ForgetDedup(ctx context.Context, db driver.DBTX, queue, messageID string, seq int64) error {
	return errNotBuilt
}
