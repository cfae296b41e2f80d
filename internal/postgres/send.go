package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// Enqueue is not built yet.
func (PostgreSQL) Enqueue(ctx context.Context, tx driver.DBTX, name string, msgs []driver.SendMessage) ([]driver.SendResult, error) {
	return nil, errNotBuilt
}
