package mqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// CreateSchedule creates the schedule name (the rules of queue names apply;
// schedules have names of their own, apart from queues and topics; a name
// "TARGET/NAME" is in the namespace of its target, see ScheduleNamespace): from now on, one message per
// period of opts is sent to opts.Target, the first for the first period
// that begins after now. A bad option is an error matching ErrInvalidArgument
// and ErrInvalidSchedule (or the message field's own sentinel); a missing
// target is ErrQueueNotFound; a name in use is ErrScheduleExists. Nothing is
// written on error. Safe for concurrent use.
func (s *Store) CreateSchedule(ctx context.Context, name string, opts ScheduleOptions) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	now := s.now()
	r, p, err := s.resolveSchedule(name, opts, now)
	if err != nil {
		return err
	}
	if r.NextAt = p.next(now); r.NextAt == never {
		return invalidf(ErrInvalidSchedule, "Cron %q has no activation after now", r.Cron)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.CreateSchedule(ctx, tx, r, now) })
	if err == nil {
		s.wakeSchedules()
	}
	return err
}

// UpdateSchedule replaces the options of the existing schedule name (zero
// values mean the defaults, as in CreateSchedule). In the same transaction,
// it first sends the periods that have already begun under the old options
// (a period that began before the update is never lost to it, nor sent
// twice); the next period is then the first of the new options that begins
// after now. A missing schedule is ErrScheduleNotFound.
func (s *Store) UpdateSchedule(ctx context.Context, name string, opts ScheduleOptions) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// "now" is read inside the transaction: a firing that committed
		// just before it is then in the past of this update, never after.
		now := s.now()
		r, p, err := s.resolveSchedule(name, opts, now)
		if err != nil {
			return err
		}
		cur, err := s.eng.GetSchedule(ctx, tx, name)
		if err != nil {
			return err
		}
		if _, err := s.fire(ctx, tx, cur, now); err != nil {
			return err
		}
		if opts.Start.IsZero() && p.spec == nil && cur.AnchorAt != 0 {
			r.AnchorAt, p.anchor = cur.AnchorAt, cur.AnchorAt // keep the grid
		}
		// After now, and after the last period fired even if the clock
		// stepped back: no period is sent twice.
		if r.NextAt = p.next(max(now, cur.LastAt)); r.NextAt == never {
			return invalidf(ErrInvalidSchedule, "Cron %q has no activation after now", r.Cron)
		}
		return s.eng.UpdateSchedule(ctx, tx, r, now)
	})
	if err == nil {
		s.wakeSchedules()
	}
	return err
}

// DeleteSchedule removes the schedule name; its messages already sent stay,
// and a period that has begun but not fired yet is not sent. A missing
// schedule is ErrScheduleNotFound.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateScheduleName(name); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.eng.DeleteSchedule(ctx, tx, name) })
}

// GetSchedule returns one schedule, or ErrScheduleNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	if err := s.ready(ctx); err != nil {
		return ScheduleInfo{}, err
	}
	if err := validateScheduleName(name); err != nil {
		return ScheduleInfo{}, err
	}
	r, err := s.eng.GetSchedule(ctx, s.db, name)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return scheduleInfo(r), nil
}

// ListSchedules returns one page of the schedules, in name order: those
// after opts.After, at most opts.Max of them, within opts.MaxBytes. It
// reads no more rows than it returns, plus the one that ends the page, so
// its memory is bounded by the page, never by every schedule.
func (s *Store) ListSchedules(ctx context.Context, opts ListSchedulesParams) ([]ScheduleInfo, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	rs, err := s.eng.ListSchedules(ctx, s.db, opts.After, opts.Max, opts.MaxBytes)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, len(rs))
	for i, r := range rs {
		out[i] = scheduleInfo(r)
	}
	return out, nil
}

func scheduleInfo(r driver.Schedule) ScheduleInfo {
	o := ScheduleOptions{Target: r.Target, Cron: r.Cron, TimeZone: r.TimeZone,
		Every: time.Duration(r.IntervalMS) * time.Millisecond, Start: fromMillis(r.AnchorAt),
		CatchUp: int(r.CatchUp), Body: r.Body, GroupID: r.GroupID, Subject: r.Subject,
		TTL: time.Duration(r.TTLMS) * time.Millisecond}
	if r.Properties != "" {
		_ = json.Unmarshal([]byte(r.Properties), &o.Properties) // written by resolveSchedule
	}
	info := ScheduleInfo{Name: r.Name, Options: o, LastAt: fromMillis(r.LastAt), Fired: r.Fired,
		Skipped: r.Skipped, LastError: r.LastError, CreatedAt: fromMillis(r.CreatedAt), UpdatedAt: fromMillis(r.UpdatedAt)}
	if r.NextAt != never {
		info.NextAt = fromMillis(r.NextAt)
	}
	return info
}
