package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// Claim is not built yet.
func (PostgreSQL) Claim(ctx context.Context, tx driver.DBTX, r driver.ClaimRequest) ([]driver.Row, error) {
	return nil, errNotBuilt
}

// MakeClaimable is not built yet.
func (PostgreSQL) MakeClaimable(ctx context.Context, tx driver.DBTX, q driver.Queue, now int64) error {
	return errNotBuilt
}

// NextDue is not built yet.
func (PostgreSQL) NextDue(ctx context.Context, db driver.DBTX, queue string) (int64, error) {
	return 0, errNotBuilt
}

// ClaimDeferred is not built yet.
func (PostgreSQL) ClaimDeferred(ctx context.Context, tx driver.DBTX, q driver.Queue, seq, now int64) (driver.Row, error) {
	return driver.Row{}, errNotBuilt
}
