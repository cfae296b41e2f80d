package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

const scheduleColumns = `name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id,
	subject, properties, ttl_ms, next_at, last_at, last_error, fired, skipped, created_at, updated_at`

// targetExists reports a missing queue or topic as errs.ErrQueueNotFound.
func targetExists(ctx context.Context, db DBTX, target string) error {
	ok, err := nameTaken(ctx, db, target)
	if err != nil {
		return fmt.Errorf("schedule target: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: schedule target %q is neither a queue nor a topic", errs.ErrQueueNotFound, target)
	}
	return nil
}

// CreateSchedule inserts r (its NextAt already computed); a name in use is
// errs.ErrScheduleExists, a target that is neither a queue nor a topic
// errs.ErrQueueNotFound.
func CreateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error {
	if err := targetExists(ctx, db, r.Target); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `INSERT INTO mqlite_schedules (`+scheduleColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', 0, 0, ?, ?) ON CONFLICT (name) DO NOTHING`,
		r.Name, r.Target, r.Cron, r.TimeZone, r.IntervalMS, r.AnchorAt, r.CatchUp, r.Body, r.GroupID,
		r.Subject, r.Properties, r.TTLMS, r.NextAt, now, now)
	if err != nil {
		return fmt.Errorf("create schedule: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrScheduleExists, r.Name)
	}
	return nil
}

// UpdateSchedule replaces the settings and NextAt of the existing schedule
// r.Name; its history (LastAt, Fired, Skipped) stays and LastError clears.
func UpdateSchedule(ctx context.Context, db DBTX, r Schedule, now int64) error {
	if err := targetExists(ctx, db, r.Target); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, `UPDATE mqlite_schedules SET target = ?, cron = ?, time_zone = ?,
		interval_ms = ?, anchor_at = ?, catch_up = ?, body = ?, group_id = ?, subject = ?, properties = ?,
		ttl_ms = ?, next_at = ?, last_error = '', updated_at = ? WHERE name = ?`,
		r.Target, r.Cron, r.TimeZone, r.IntervalMS, r.AnchorAt, r.CatchUp, r.Body, r.GroupID, r.Subject,
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
func DeleteSchedule(ctx context.Context, db DBTX, name string) error {
	res, err := db.ExecContext(ctx, `DELETE FROM mqlite_schedules WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete schedule: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, name)
	}
	return nil
}

// GetSchedule reads one schedule; a missing one is errs.ErrScheduleNotFound.
func GetSchedule(ctx context.Context, db DBTX, name string) (Schedule, error) {
	r, err := driver.ScanSchedule(db.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM mqlite_schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Schedule{}, fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, name)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("get schedule: %w", err)
	}
	return r, nil
}

// scheduleSizeSQL is Schedule.Size in SQL. length of a BLOB reads no
// overflow page: SQLite takes it from the record's header.
const scheduleSizeSQL = `octet_length(name) + octet_length(target) + octet_length(cron) + octet_length(time_zone) +
	length(body) + octet_length(group_id) + octet_length(subject) + octet_length(properties) + octet_length(last_error)`

// ListSchedules returns up to limit schedules named after after, in name
// order. With maxBytes > 0 it stops before their sizes add up past it (the
// first comes whatever its size): the sizes are read first, without the
// bodies, so that no schedule past the page is ever read whole.
func ListSchedules(ctx context.Context, db DBTX, after string, limit int, maxBytes int64) ([]Schedule, error) {
	if maxBytes <= 0 {
		return querySchedules(ctx, db, 0, `SELECT `+scheduleColumns+` FROM mqlite_schedules
			WHERE name > ? ORDER BY name LIMIT ?`, after, limit)
	}
	last, err := schedulePageEnd(ctx, db, after, limit, maxBytes)
	if err != nil || last == "" {
		return nil, err
	}
	// A schedule changed since its size was read is bounded again here.
	return querySchedules(ctx, db, maxBytes, `SELECT `+scheduleColumns+` FROM mqlite_schedules
		WHERE name > ? AND name <= ? ORDER BY name LIMIT ?`, after, last, limit)
}

// schedulePageEnd returns the name of the last schedule of the page that
// starts after after: at most limit schedules, within maxBytes (the first
// whatever its size); "" when no schedule follows after.
func schedulePageEnd(ctx context.Context, db DBTX, after string, limit int, maxBytes int64) (string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, `+scheduleSizeSQL+` FROM mqlite_schedules
		WHERE name > ? ORDER BY name LIMIT ?`, after, limit)
	if err != nil {
		return "", fmt.Errorf("list schedules: %w", err)
	}
	return driver.SchedulePageEnd(rows, maxBytes)
}

// DueSchedules returns up to limit schedules whose next period has begun by
// now, earliest first (mqlite_schedules_next).
func DueSchedules(ctx context.Context, db DBTX, now int64, limit int) ([]Schedule, error) {
	return querySchedules(ctx, db, 0, `SELECT `+scheduleColumns+` FROM mqlite_schedules
		WHERE next_at <= ? ORDER BY next_at LIMIT ?`, now, limit)
}

// querySchedules reads the schedules of query, stopping before their sizes
// add up past maxBytes when it is positive (the first is always kept).
func querySchedules(ctx context.Context, db DBTX, maxBytes int64, query string, args ...any) ([]Schedule, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return driver.ReadSchedules(rows, maxBytes)
}

// AdvanceSchedule records a firing of the schedule name. Call it in the
// transaction that enqueued the periods' messages: the two commit together,
// which is what makes a period fire once.
func AdvanceSchedule(ctx context.Context, db DBTX, name string, a Advance) error {
	_, err := db.ExecContext(ctx, `UPDATE mqlite_schedules SET next_at = ?, last_at = max(last_at, ?),
		fired = fired + ?, skipped = skipped + ?, last_error = ? WHERE name = ?`,
		a.NextAt, a.LastAt, a.Fired, a.Skipped, a.LastError, name)
	if err != nil {
		return fmt.Errorf("advance schedule: %w", err)
	}
	return nil
}

// NextScheduleAt returns the earliest next period of any schedule, or 0
// when there is none.
func NextScheduleAt(ctx context.Context, db DBTX) (int64, error) {
	var next sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT min(next_at) FROM mqlite_schedules`).Scan(&next); err != nil {
		return 0, fmt.Errorf("next schedule: %w", err)
	}
	return next.Int64, nil
}
