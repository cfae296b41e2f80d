package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/errs"
)

// Schedule is one row of the schedules table: what to send, where, and the
// state of its periods. Times are epoch milliseconds.
type Schedule struct {
	Name       string
	Target     string // a queue or a topic
	Cron       string // "" for an interval schedule
	TimeZone   string // the cron's time zone; "" is UTC
	IntervalMS int64  // 0 for a cron schedule
	AnchorAt   int64  // interval: the grid's origin; cron: no period before it (0: none)
	CatchUp    int64  // at most this many periods fire in one go
	Body       []byte
	GroupID    string
	Subject    string
	Properties string // JSON object, "" = none
	TTLMS      int64
	NextAt     int64 // the start of the first period not fired yet
	LastAt     int64 // the start of the last period fired; 0 for none
	LastError  string
	Fired      int64 // periods fired
	Skipped    int64 // periods skipped by the catch-up bound
	CreatedAt  int64
	UpdatedAt  int64
}

const scheduleColumns = `name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id,
	subject, properties, ttl_ms, next_at, last_at, last_error, fired, skipped, created_at, updated_at`

func scanSchedule(s scanner) (Schedule, error) {
	var r Schedule
	err := s.Scan(&r.Name, &r.Target, &r.Cron, &r.TimeZone, &r.IntervalMS, &r.AnchorAt, &r.CatchUp, &r.Body,
		&r.GroupID, &r.Subject, &r.Properties, &r.TTLMS, &r.NextAt, &r.LastAt, &r.LastError, &r.Fired,
		&r.Skipped, &r.CreatedAt, &r.UpdatedAt)
	if r.Body == nil {
		r.Body = []byte{}
	}
	return r, err
}

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
	r, err := scanSchedule(db.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM mqlite_schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Schedule{}, fmt.Errorf("%w: %q", errs.ErrScheduleNotFound, name)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("get schedule: %w", err)
	}
	return r, nil
}

// ListSchedules returns every schedule in name order.
func ListSchedules(ctx context.Context, db DBTX) ([]Schedule, error) {
	return querySchedules(ctx, db, `SELECT `+scheduleColumns+` FROM mqlite_schedules ORDER BY name`)
}

// DueSchedules returns up to limit schedules whose next period has begun by
// now, earliest first (mqlite_schedules_next).
func DueSchedules(ctx context.Context, db DBTX, now int64, limit int) ([]Schedule, error) {
	return querySchedules(ctx, db, `SELECT `+scheduleColumns+` FROM mqlite_schedules
		WHERE next_at <= ? ORDER BY next_at LIMIT ?`, now, limit)
}

func querySchedules(ctx context.Context, db DBTX, query string, args ...any) ([]Schedule, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		r, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Advance is what one firing did to a schedule.
type Advance struct {
	NextAt    int64 // the new start of the first period not fired
	LastAt    int64 // the last period fired; 0 keeps the current one
	Fired     int64 // periods fired now
	Skipped   int64 // periods skipped now
	LastError string
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
