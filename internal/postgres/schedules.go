package postgres

import (
	"context"

	"github.com/mqlite/mqlite/internal/driver"
)

// CreateSchedule is not built yet.
func (PostgreSQL) CreateSchedule(ctx context.Context, db driver.DBTX, r driver.Schedule, now int64) error {
	return errNotBuilt
}

// UpdateSchedule is not built yet.
func (PostgreSQL) UpdateSchedule(ctx context.Context, db driver.DBTX, r driver.Schedule, now int64) error {
	return errNotBuilt
}

// DeleteSchedule is not built yet.
func (PostgreSQL) DeleteSchedule(ctx context.Context, db driver.DBTX, name string) error {
	return errNotBuilt
}

// GetSchedule is not built yet.
func (PostgreSQL) GetSchedule(ctx context.Context, db driver.DBTX, name string) (driver.Schedule, error) {
	return driver.Schedule{}, errNotBuilt
}

// ListSchedules is not built yet.
func (PostgreSQL) ListSchedules(ctx context.Context, db driver.DBTX, after string, limit int, maxBytes int64) ([]driver.Schedule, error) {
	return nil, errNotBuilt
}

// DueSchedules is not built yet.
func (PostgreSQL) DueSchedules(ctx context.Context, db driver.DBTX, now int64, limit int) ([]driver.Schedule, error) {
	return nil, errNotBuilt
}

// AdvanceSchedule is not built yet.
func (PostgreSQL) AdvanceSchedule(ctx context.Context, db driver.DBTX, name string, a driver.Advance) error {
	return errNotBuilt
}

// NextScheduleAt is not built yet.
func (PostgreSQL) NextScheduleAt(ctx context.Context, db driver.DBTX) (int64, error) {
	return 0, errNotBuilt
}
