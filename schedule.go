package mqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/mqlite/mqlite/internal/engine"
)

// Limits and defaults of schedules.
const (
	// MinScheduleEvery is the shortest ScheduleOptions.Every.
	MinScheduleEvery = time.Second
	// DefaultScheduleCatchUp is ScheduleOptions.CatchUp when it is 0.
	DefaultScheduleCatchUp = 10
	// MaxScheduleCatchUp is the largest ScheduleOptions.CatchUp.
	MaxScheduleCatchUp = 1000
)

// ScheduleOptions configures a schedule: where its messages go, when, and
// what each one carries. Exactly one of Cron and Every is set.
type ScheduleOptions struct {
	// Target is the queue or topic each period's message is sent to. It
	// must exist when the schedule is created or updated.
	Target string
	// Cron is a standard five-field cron expression ("*/15 9-17 * * 1-5"),
	// a descriptor (@hourly, @daily, @weekly, @monthly, @yearly, or
	// "@every 90s"), optionally preceded by "CRON_TZ=Europe/Paris ".
	// Each activation is one period.
	Cron string
	// TimeZone is the IANA time zone Cron is read in; defaults to UTC. It
	// needs the system's time zone database (or a program that imports
	// time/tzdata). Not allowed with Every, nor with a CRON_TZ prefix.
	TimeZone string
	// Every is a fixed period, at least MinScheduleEvery, counted in whole
	// milliseconds from Start.
	Every time.Duration
	// Start is the first moment a period may begin. For Every, the periods
	// are Start + k*Every; it defaults to the moment of CreateSchedule, so
	// the first period begins Every later. On UpdateSchedule the zero value
	// keeps the schedule's origin. For Cron it only holds periods back.
	Start time.Time
	// CatchUp is how many periods, at most, are enqueued in one go when a
	// schedule falls behind (no store had the file open, or the store was
	// busy): the most recent CatchUp of the missed periods are sent, each
	// once, and the earlier ones are skipped and counted in
	// ScheduleInfo.Skipped. Defaults to 10 (DefaultScheduleCatchUp); 1
	// sends only the latest period; at most MaxScheduleCatchUp.
	CatchUp int

	// Body, GroupID, Subject, Properties and TTL are those of each message,
	// as outbox.Message takes them (the same limits apply). Its MessageID
	// is "schedule/<name>/<period start in epoch milliseconds>", so a
	// period's message is never de-duplicated against another period's.
	Body       []byte
	GroupID    string
	Subject    string
	Properties map[string]string
	TTL        time.Duration
}

// ScheduleInfo describes a schedule: its options (defaults filled in) and
// where its periods stand.
type ScheduleInfo struct {
	Name    string
	Options ScheduleOptions
	// NextAt is the start of the next period to fire; the zero time when
	// the cron expression has no activation left.
	NextAt time.Time
	// LastAt is the start of the last period fired (sent, or refused: see
	// LastError); zero before the first.
	LastAt time.Time
	// Fired counts the periods whose message was sent, Skipped those left
	// out by the CatchUp bound or lost to a refused send (see LastError).
	Fired, Skipped int64
	// LastError is why the last firing sent nothing (its target was
	// deleted, say), or a per-message error; "" when it went well.
	LastError string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleMessageID returns the MessageID of the message schedule name sends
// for the period that starts at periodStart.
func ScheduleMessageID(name string, periodStart time.Time) string {
	return periodID(name, millis(periodStart))
}

func periodID(name string, at int64) string { return fmt.Sprintf("schedule/%s/%d", name, at) }

// never is the next_at of a schedule that has no period left.
const never = math.MaxInt64

// periods computes the periods of a schedule, in epoch milliseconds.
type periods struct {
	spec   cron.Schedule // nil for a fixed interval
	every  int64         // the interval, ms
	anchor int64         // interval: the origin; cron: no period before it
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile reads a stored schedule's timing.
func compile(r engine.Schedule) (periods, error) {
	p := periods{every: r.IntervalMS, anchor: r.AnchorAt}
	if r.Cron == "" {
		return p, nil
	}
	spec := r.Cron
	if r.TimeZone != "" {
		spec = "CRON_TZ=" + r.TimeZone + " " + spec
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return p, invalidf(ErrInvalidSchedule, "Cron %q: %v", r.Cron, err)
	}
	if d, ok := sched.(cron.ConstantDelaySchedule); ok {
		// "@every d": a fixed interval on the schedule's own grid, rather
		// than robfig's "d after whenever it last ran".
		p.every = d.Delay.Milliseconds()
		return p, nil
	}
	p.spec = sched
	return p, nil
}

// next returns the start of the first period strictly after t, or never.
func (p periods) next(t int64) int64 {
	if p.spec == nil {
		if t < p.anchor {
			return p.anchor
		}
		return p.anchor + ((t-p.anchor)/p.every+1)*p.every
	}
	n := p.spec.Next(time.UnixMilli(max(t, p.anchor-1)))
	if n.IsZero() {
		return never
	}
	return n.UnixMilli()
}

// maxEnumerate bounds the cron activations one firing walks through, so
// that a schedule years behind costs bounded work per transaction.
const maxEnumerate = 1 << 14

// due returns the periods to fire now, oldest first: at most limit of the
// periods that began in [from, now], the latest ones; skipped counts the
// earlier ones; next is the new start of the first period not fired. from
// is the schedule's next_at.
func (p periods) due(from, now int64, limit int) (fire []int64, skipped, next int64) {
	if from > now {
		return nil, 0, from
	}
	if p.spec == nil {
		last := from + (now-from)/p.every*p.every
		n := (last-from)/p.every + 1
		first := from
		if n > int64(limit) {
			skipped = n - int64(limit)
			first = last - int64(limit-1)*p.every
		}
		for t := first; t <= last; t += p.every {
			fire = append(fire, t)
		}
		return fire, skipped, last + p.every
	}
	var count int64
	t := from
	for ; t <= now; t = p.next(t) {
		count++
		fire = append(fire, t)
		if len(fire) > limit {
			fire = fire[1:]
		}
		if count == maxEnumerate {
			// More may follow: only what precedes the last limit periods
			// walked is surely skipped. The next round goes on from there.
			return nil, count - int64(len(fire)), fire[0]
		}
	}
	return fire, count - int64(len(fire)), t
}

// resolveSchedule validates opts and returns the row to store (NextAt not
// set) with its periods; now is the store's clock.
func (s *Store) resolveSchedule(name string, o ScheduleOptions, now int64) (engine.Schedule, periods, error) {
	var p periods
	if err := validateName(ErrInvalidSchedule, name); err != nil {
		return engine.Schedule{}, p, err
	}
	if err := validateQueueName(o.Target); err != nil {
		return engine.Schedule{}, p, err
	}
	r := engine.Schedule{Name: name, Target: o.Target, Cron: strings.TrimSpace(o.Cron), TimeZone: o.TimeZone,
		Body: o.Body, GroupID: o.GroupID, Subject: o.Subject, TTLMS: o.TTL.Milliseconds()}
	if r.Body == nil {
		r.Body = []byte{}
	}
	switch {
	case (r.Cron == "") == (o.Every == 0):
		return r, p, invalidf(ErrInvalidSchedule, "set exactly one of Cron and Every")
	case r.Cron == "" && o.Every < MinScheduleEvery:
		return r, p, invalidf(ErrInvalidSchedule, "Every %v, at least %v", o.Every, MinScheduleEvery)
	case r.Cron == "" && o.TimeZone != "":
		return r, p, invalidf(ErrInvalidSchedule, "TimeZone is for Cron, not Every")
	case o.TimeZone != "" && (strings.HasPrefix(r.Cron, "CRON_TZ=") || strings.HasPrefix(r.Cron, "TZ=")):
		return r, p, invalidf(ErrInvalidSchedule, "time zone given twice: TimeZone and a CRON_TZ prefix")
	}
	if o.TimeZone != "" {
		if _, err := time.LoadLocation(o.TimeZone); err != nil {
			return r, p, invalidf(ErrInvalidSchedule, "TimeZone %q: %v", o.TimeZone, err)
		}
	}
	switch {
	case o.CatchUp == 0:
		r.CatchUp = DefaultScheduleCatchUp
	case o.CatchUp < 1 || o.CatchUp > MaxScheduleCatchUp:
		return r, p, invalidf(ErrInvalidSchedule, "CatchUp %d, want 1 to %d", o.CatchUp, MaxScheduleCatchUp)
	default:
		r.CatchUp = int64(o.CatchUp)
	}
	f := engine.Fields{MessageID: periodID(name, now), GroupID: o.GroupID, Subject: o.Subject,
		Properties: o.Properties, TTL: o.TTL}
	if err := f.Validate(); err != nil {
		return r, p, err
	}
	if len(o.Properties) > 0 {
		b, err := json.Marshal(o.Properties)
		if err != nil {
			return r, p, invalidf(ErrInvalidMessage, "Properties: %v", err)
		}
		r.Properties = string(b)
	}
	om := engine.OutMessage{Body: r.Body, MessageID: f.MessageID, GroupID: r.GroupID, Subject: r.Subject,
		Properties: r.Properties}
	if size := om.Size(); size > int64(s.opts.MaxMessageBytes) {
		return r, p, fmt.Errorf("%w: schedule message of %d bytes, at most %d", ErrMessageTooLarge, size, s.opts.MaxMessageBytes)
	}
	if !o.Start.IsZero() {
		r.AnchorAt = millis(o.Start)
	}
	if r.Cron == "" {
		r.IntervalMS = o.Every.Milliseconds()
		if r.AnchorAt == 0 {
			r.AnchorAt = now
		}
	}
	p, err := compile(r)
	if err != nil {
		return r, p, err
	}
	if p.spec == nil && r.Cron != "" {
		if p.every < MinScheduleEvery.Milliseconds() {
			return r, p, invalidf(ErrInvalidSchedule, "Cron %q: every %dms, at least %v", r.Cron, p.every, MinScheduleEvery)
		}
		if r.AnchorAt == 0 {
			r.AnchorAt, p.anchor = now, now
		}
	}
	return r, p, nil
}

// CreateSchedule creates the schedule name (the rules of queue names apply;
// schedules have a namespace of their own): from now on, one message per
// period of opts is sent to opts.Target, the first for the first period
// that begins after now. A bad option is an error matching ErrInvalidArgument
// and ErrInvalidSchedule (or the message field's own sentinel); a missing
// target is ErrQueueNotFound; a name in use is ErrScheduleExists. Nothing is
// written on error. Safe for concurrent use.
func (s *Store) CreateSchedule(ctx context.Context, name string, opts ScheduleOptions) error {
	if err := s.checkOpen(); err != nil {
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
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return engine.CreateSchedule(ctx, tx, r, now) })
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
	if err := s.checkOpen(); err != nil {
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
		cur, err := engine.GetSchedule(ctx, tx, name)
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
		return engine.UpdateSchedule(ctx, tx, r, now)
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
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := validateName(ErrInvalidSchedule, name); err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return engine.DeleteSchedule(ctx, tx, name) })
}

// GetSchedule returns one schedule, or ErrScheduleNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (ScheduleInfo, error) {
	if err := s.checkOpen(); err != nil {
		return ScheduleInfo{}, err
	}
	if err := validateName(ErrInvalidSchedule, name); err != nil {
		return ScheduleInfo{}, err
	}
	r, err := engine.GetSchedule(ctx, s.db, name)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return scheduleInfo(r), nil
}

// ListSchedules returns every schedule in name order.
func (s *Store) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rs, err := engine.ListSchedules(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, len(rs))
	for i, r := range rs {
		out[i] = scheduleInfo(r)
	}
	return out, nil
}

func scheduleInfo(r engine.Schedule) ScheduleInfo {
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

// fire sends the periods of r that began by now and records the advance,
// inside tx: the messages and the schedule's new next_at commit together,
// which is what sends each period once, whichever store holds the file.
// A send that fails for a reason a retry would not cure (the target was
// deleted, the message grew too large for the store) skips the periods
// and records why in last_error; any other error is returned, and the
// caller rolls the whole firing back.
func (s *Store) fire(ctx context.Context, tx *sql.Tx, r engine.Schedule, now int64) (int64, error) {
	if r.NextAt > now {
		return 0, nil
	}
	p, err := compile(r)
	if err != nil {
		// A row this binary cannot read (its time zone is unknown here):
		// park it rather than fail every firing of every schedule.
		return 0, engine.AdvanceSchedule(ctx, tx, r.Name, engine.Advance{NextAt: never, LastError: err.Error()})
	}
	fire, skipped, next := p.due(r.NextAt, now, int(r.CatchUp))
	a := engine.Advance{NextAt: next, Skipped: skipped}
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
	return a.Fired, engine.AdvanceSchedule(ctx, tx, r.Name, a)
}

// sendPeriods sends r's message for each period of fire into r.Target and
// returns how many were written (or found already written: a duplicate of
// its own period). A refusal that a retry would not cure (the target was
// deleted, the store's MaxMessageBytes shrank, a period's MessageID taken
// by another body) is reported as why, not as err.
func (s *Store) sendPeriods(ctx context.Context, tx *sql.Tx, r engine.Schedule, fire []int64) (sent int64, why string, err error) {
	var props map[string]string
	if r.Properties != "" {
		_ = json.Unmarshal([]byte(r.Properties), &props) // written by resolveSchedule
	}
	msgs := make([]engine.OutMessage, len(fire))
	for i, at := range fire {
		msgs[i] = engine.OutMessage{Body: r.Body, MessageID: periodID(r.Name, at), GroupID: r.GroupID,
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
	rs, err := engine.DueSchedules(ctx, tx, now, scheduleBatch)
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
	if next, err = engine.NextScheduleAt(ctx, tx); err != nil {
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
