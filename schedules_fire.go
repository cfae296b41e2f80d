package mqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// fire sends the periods of r that began by now and records the advance,
// inside tx: the messages and the schedule's new next_at commit together,
// which is what sends each period once, whichever store holds the file.
// A send that fails for a reason a retry would not cure (the target was
// deleted, the message grew too large for the store) skips the periods
// and records why in last_error; any other error is returned, and the
// caller rolls the whole firing back.
func (s *Store) fire(ctx context.Context, tx *sql.Tx, r driver.Schedule, now int64) (int64, error) {
	if r.NextAt > now {
		return 0, nil
	}
	p, err := compile(r)
	if err != nil {
		// A row this binary cannot read (its time zone is unknown here):
		// park it rather than fail every firing of every schedule.
		return 0, s.eng.AdvanceSchedule(ctx, tx, r.Name, driver.Advance{NextAt: never, LastError: err.Error()})
	}
	fire, skipped, next := p.due(r.NextAt, now, int(r.CatchUp))
	a := driver.Advance{NextAt: next, Skipped: skipped}
	if len(fire) > 0 {
		a.LastAt = fire[len(fire)-1]
		if a.Fired, a.LastError, err = s.sendPeriods(ctx, tx, r, fire); err != nil {
			return 0, err
		}
		a.Skipped += int64(len(fire)) - a.Fired
	}
	if a.Skipped > 0 {
		s.opts.Logger.Warn("mqlite: schedule skipped periods", "schedule", r.Name, "path", s.path,
			"skipped", a.Skipped, "next", fromMillis(a.NextAt), "err", a.LastError)
	}
	return a.Fired, s.eng.AdvanceSchedule(ctx, tx, r.Name, a)
}

// sendPeriods sends r's message for each period of fire into r.Target and
// returns how many were written (or found already written: a duplicate of
// its own period). A refusal that a retry would not cure (the target was
// deleted, the store's MaxMessageBytes shrank, a period's MessageID taken
// by another body) is reported as why, not as err.
func (s *Store) sendPeriods(ctx context.Context, tx *sql.Tx, r driver.Schedule, fire []int64) (sent int64, why string, err error) {
	var props map[string]string
	if r.Properties != "" {
		_ = json.Unmarshal([]byte(r.Properties), &props) // written by resolveSchedule
	}
	msgs := make([]driver.SendMessage, len(fire))
	for i, at := range fire {
		msgs[i] = driver.SendMessage{Body: r.Body, MessageID: periodID(r.Name, at), GroupID: r.GroupID,
			Subject: r.Subject, Properties: r.Properties, Props: props, TTLMS: r.TTLMS}
	}
	res, err := s.eng.Enqueue(ctx, tx, r.Target, msgs)
	switch {
	case errors.Is(err, ErrQueueNotFound), errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrMessageTooLarge):
		return 0, err.Error(), nil
	case err != nil:
		return 0, "", fmt.Errorf("schedule %s: %w", r.Name, err)
	}
	for _, x := range res {
		if x.Err != nil {
			why = x.Err.Error()
			continue
		}
		sent++
	}
	return sent, why, nil
}

// scheduleBatch is how many due schedules one firing transaction takes.
const scheduleBatch = 64

// fireSchedules sends every period due by the store's clock, in
// transactions of up to scheduleBatch schedules, and returns the messages
// sent and the earliest next period left (0: no schedule).
func (s *Store) fireSchedules(ctx context.Context) (sent, next int64, err error) {
	for {
		if err := s.checkOpen(); err != nil {
			return sent, 0, err
		}
		now := s.now()
		n, nx, err := s.fireRound(ctx, now)
		sent, next = sent+n, nx
		if err != nil || next == 0 || next > now {
			return sent, next, err
		}
	}
}

// fireRound is one firing transaction: the due schedules (up to
// scheduleBatch) send their periods and advance. It begins with ctx
// itself, not with Store.Tx's uncancellable context, as the sweeps do:
// Close cancels the loop's ctx, so a firing waiting for the connection
// gives up at once (Close never waits behind a caller who holds the
// connection, such as a Tx callback that calls Close), and one in flight
// is rolled back whole with its transaction.
func (s *Store) fireRound(ctx context.Context, now int64) (sent, next int64, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		if s.isClosed() {
			return 0, 0, ErrClosed
		}
		return 0, 0, fmt.Errorf("schedules: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	rs, err := s.eng.DueSchedules(ctx, tx, now, scheduleBatch)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range rs {
		n, err := s.fire(ctx, tx, r, now)
		if err != nil {
			return 0, 0, err
		}
		sent += n
	}
	if next, err = s.eng.NextScheduleAt(ctx, tx); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("schedules: commit: %w", err)
	}
	return sent, next, nil
}

// wakeSchedules tells the schedule loop that a schedule changed: its next
// period may be earlier than the one the loop sleeps for.
func (s *Store) wakeSchedules() {
	select {
	case s.scheduleWake <- struct{}{}:
	default:
	}
}

// scheduleRetry is how soon the schedule loop tries again after a failed
// firing (at most Config.ScheduleInterval).
const scheduleRetry = time.Second

// scheduleLoop sends each schedule's messages as their periods begin: it
// sleeps until the earliest next period of any schedule (a timer armed by
// the store's clock, no polling), until a schedule changes, or at most
// Config.ScheduleInterval, the safety net for a clock that jumps. It stops
// when the store closes; Close waits for it.
func (s *Store) scheduleLoop() {
	for {
		wait := s.opts.ScheduleInterval
		n, next, err := s.fireSchedules(s.loops.ctx)
		switch {
		case err != nil && s.isClosed():
			return
		case err != nil:
			s.opts.Logger.Error("mqlite: schedules failed", "path", s.path, "err", err)
			wait = min(wait, scheduleRetry)
		case next > 0:
			// In milliseconds first: next may be never (math.MaxInt64).
			if ms := next - s.now(); ms < wait.Milliseconds() {
				wait = time.Duration(ms) * time.Millisecond
			}
		}
		if n > 0 {
			s.opts.Logger.Debug("mqlite: schedules fired", "path", s.path, "messages", n)
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-s.closed:
			t.Stop()
			return
		case <-s.scheduleWake:
		case <-t.C:
		}
		t.Stop()
	}
}
