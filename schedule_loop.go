package mqlite

import "time"

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
