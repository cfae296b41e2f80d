package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// scheduleColumns are the columns driver.ScanSchedule reads, in its order.
const scheduleColumns = `name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id,
	subject, properties, ttl_ms, next_at, last_at, last_error, fired, skipped, created_at, updated_at`

// targetExists reports a target that is neither a queue nor a topic as
// errs.ErrQueueNotFound.
func targetExists(ctx context.Context, db driver.DBTX, target string) error {
	var ok bool
	err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_queues WHERE name = $1)
		OR EXISTS (SELECT 1 FROM mqlite_topics WHERE name = $1)`, target).Scan(&ok)
	if err != nil {
		return fmt.Errorf("schedule target: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: schedule target %q is neither a queue nor a topic", errs.ErrQueueNotFound, target)
	}
	return nil
}

// CreateSchedule inserts r (its NextAt already computed); a name in use is
// errs.ErrScheduleExists, also when another process creates it at the same
// moment (ON CONFLICT DO NOTHING waits for that process and inserts
// nothing), and a target that is neither a queue nor a topic
// errs.ErrQueueNotFound. A target deleted meanwhile by another process is
// the firing's concern: it records why in last_error.
func (PostgreSQL) CreateSchedule(ctx context.Context, db driver.DBTX, r driver.Schedule, now int64) error {
	if err := targetExists(ctx, db, r.Target); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `INSERT INTO mqlite_schedules (`+scheduleColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0, '', 0, 0, $14, $14)
		ON CONFLICT (name) DO NOTHING`,
		r.Name, r.Target, r.Cron, r.TimeZone, r.IntervalMS, r.AnchorAt, r.CatchUp, nonNil(r.Body), r.GroupID,
		r.Subject, r.Properties, r.TTLMS, r.NextAt, now)
	if uniqueViolation(err) {
		return fmt.Errorf("%w: %q", errs.ErrScheduleExists, r.Name)
	}
	if err != nil {
		return fmt.Errorf("create schedule: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrScheduleExists, r.Name)
	}
	return nil
}

// nonNil is b, or an empty body for nil (the column is NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// UpdateSchedule replaces the settings and NextAt of the existing schedule
// r.Name; its history (LastAt, Fired, Skipped) stays and LastError clears.
// A firing in another process holds the row (DueSchedules): the update
// waits for it and lands after, as on one writer.
func (PostgreSQL) UpdateSchedule(ctx context.Context, db driver.DBTX, r driver.Schedule, now int64) error {
	if err := targetExists(ctx, db, r.Target); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `UPDATE mqlite_schedules SET target = $1, cron = $2, time_zone = $3,
		interval_ms = $4, anchor_at = $5, catch_up = $6, body = $7, group_id = $8, subject = $9, properties = $10,
		ttl_ms = $11, next_at = $12, last_error = '', updated_at = $13 WHERE name = $14`,
		r.Target, r.Cron, r.TimeZone, r.IntervalMS, r.AnchorAt, r.CatchUp, nonNil(r.Body), r.GroupID, r.Subject,
		r.Properties, r.TTLMS, r.NextAt, now, r.Name)
	if err != nil {
		return fmt.Errorf("update schedule: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, r.Name)
	}
	return nil
}

// DeleteSchedule removes a schedule; a missing one is errs.ErrScheduleNotFound.
// The messages it already enqueued stay.
func (PostgreSQL) DeleteSchedule(ctx context.Context, db driver.DBTX, name string) error {
	res, err := db.ExecContext(ctx, `DELETE FROM mqlite_schedules WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, name)
	}
	return nil
}

// GetSchedule reads one schedule; a missing one is errs.ErrScheduleNotFound.
func (PostgreSQL) GetSchedule(ctx context.Context, db driver.DBTX, name string) (driver.Schedule, error) {
	r, err := driver.ScanSchedule(db.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM mqlite_schedules WHERE name = $1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Schedule{}, fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, name)
	}
	if err != nil {
		return driver.Schedule{}, fmt.Errorf("get schedule: %w", err)
	}
	return r, nil
}

// scheduleSizeSQL is Schedule.Size in SQL. octet_length of a bytea reads
// the stored length, not the body out of line (TOAST).
const scheduleSizeSQL = `octet_length(name) + octet_length(target) + octet_length(cron) + octet_length(time_zone) +
	octet_length(body) + octet_length(group_id) + octet_length(subject) + octet_length(properties) + octet_length(last_error)`

// ListSchedules returns up to limit schedules named after after, in name
// order. With maxBytes > 0 it stops before their sizes add up past it (the
// first comes whatever its size): the sizes are read first, without the
// bodies, so that no schedule past the page is ever read whole.
func (PostgreSQL) ListSchedules(ctx context.Context, db driver.DBTX, after string, limit int, maxBytes int64) ([]driver.Schedule, error) {
	if maxBytes <= 0 {
		return querySchedules(ctx, db, 0, `SELECT `+scheduleColumns+` FROM mqlite_schedules
			WHERE name > $1 ORDER BY name LIMIT $2`, after, limit)
	}
	last, err := schedulePageEnd(ctx, db, after, limit, maxBytes)
	if err != nil || last == "" {
		return nil, err
	}
	// A schedule changed since its size was read is bounded again here.
	return querySchedules(ctx, db, maxBytes, `SELECT `+scheduleColumns+` FROM mqlite_schedules
		WHERE name > $1 AND name <= $2 ORDER BY name LIMIT $3`, after, last, limit)
}

// schedulePageEnd returns the name of the last schedule of the page that
// starts after after: at most limit schedules, within maxBytes (the first
// whatever its size); "" when no schedule follows after.
func schedulePageEnd(ctx context.Context, db driver.DBTX, after string, limit int, maxBytes int64) (string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, `+scheduleSizeSQL+` FROM mqlite_schedules
		WHERE name > $1 ORDER BY name LIMIT $2`, after, limit)
	if err != nil {
		return "", fmt.Errorf("list schedules: %w", err)
	}
	return driver.SchedulePageEnd(rows, maxBytes)
}

// DueSchedules returns up to limit schedules whose next period has begun by
// now, earliest first (mqlite_schedules_next), and locks them for the
// firing transaction it runs in: FOR UPDATE SKIP LOCKED, so that of two
// processes firing at once each takes the schedules the other does not
// hold, and a row another process fired and committed meanwhile is read
// again at its new next_at (READ COMMITTED re-checks a locked row's latest
// version) and left out. With AdvanceSchedule in the same transaction,
// that is what fires a period once whatever process fires it. Outside a
// transaction the lock ends with the statement and protects nothing.
func (PostgreSQL) DueSchedules(ctx context.Context, db driver.DBTX, now int64, limit int) ([]driver.Schedule, error) {
	return querySchedules(ctx, db, 0, `SELECT `+scheduleColumns+` FROM mqlite_schedules
		WHERE next_at <= $1 ORDER BY next_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
}

// querySchedules reads the schedules of query, stopping before their sizes
// add up past maxBytes when it is positive (the first is always kept).
func querySchedules(ctx context.Context, db driver.DBTX, maxBytes int64, query string, args ...any) ([]driver.Schedule, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return driver.ReadSchedules(rows, maxBytes)
}

// AdvanceSchedule records a firing of the schedule name. Call it in the
// transaction that enqueued the periods' messages and that locked the row
// (DueSchedules): the three commit together, which is what makes a period
// fire once.
func (PostgreSQL) AdvanceSchedule(ctx context.Context, db driver.DBTX, name string, a driver.Advance) error {
	_, err := db.ExecContext(ctx, `UPDATE mqlite_schedules SET next_at = $1, last_at = GREATEST(last_at, $2),
		fired = fired + $3, skipped = skipped + $4, last_error = $5 WHERE name = $6`,
		a.NextAt, a.LastAt, a.Fired, a.Skipped, a.LastError, name)
	if err != nil {
		return fmt.Errorf("advance schedule: %w", err)
	}
	return nil
}

// NextScheduleAt returns the earliest next period of the schedules no
// other process is firing now, or 0 when there is none. A schedule whose
// row another firing transaction holds (FOR UPDATE, DueSchedules) is left
// to it: FOR KEY SHARE SKIP LOCKED passes over it, where a plain min would
// return its period, already due, and send the caller's firing loop round
// again and again until the other process commits. The key-share lock
// blocks no update of the row, only another firing's claim on it and its
// delete, until the caller's transaction ends.
func (PostgreSQL) NextScheduleAt(ctx context.Context, db driver.DBTX) (int64, error) {
	var next int64
	err := db.QueryRowContext(ctx, `SELECT next_at FROM mqlite_schedules
		ORDER BY next_at LIMIT 1 FOR KEY SHARE SKIP LOCKED`).Scan(&next)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("next schedule: %w", err)
	}
	return next, nil
}
