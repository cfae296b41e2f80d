package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// Settle is not built yet.
func (PostgreSQL) Settle(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	return errNotBuilt
}

// SettleTx is not built yet.
func (PostgreSQL) SettleTx(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	return errNotBuilt
}

// CompleteMany is not built yet.
func (PostgreSQL) CompleteMany(ctx context.Context, tx driver.DBTX, locks []driver.Settlement, now int64) ([]error, error) {
	return nil, errNotBuilt
}

// Renew is not built yet.
func (PostgreSQL) Renew(ctx context.Context, tx driver.DBTX, r driver.RenewRequest) (int64, error) {
	return 0, errNotBuilt
}
