package mqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
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

// ListSchedulesParams selects one page of ListSchedules. A caller reads
// every schedule page by page: the next page starts After the last name of
// the previous one, and an empty page is the end.
type ListSchedulesParams struct {
	// After is the name the page starts after, in name order. Defaults to
	// "" (the first schedule).
	After string
	// Max is how many schedules to return at most. Defaults to 100; at
	// most 1000.
	Max int
	// MaxBytes, when positive, ends the page before the sizes of its
	// schedules (their message's body and metadata, their name and
	// target) add up past it; the first schedule comes whatever its size. Zero
	// means no bound.
	MaxBytes int64
}

func (o *ListSchedulesParams) validate() error {
	var err error
	if o.Max, err = batchMax(o.Max, 100); err != nil {
		return err
	}
	if o.After != "" {
		if err := validateScheduleName(o.After); err != nil {
			return err
		}
	}
	if o.MaxBytes < 0 {
		return invalidf(ErrInvalidArgument, "negative MaxBytes")
	}
	return nil
}

// ScheduleMessageID returns the MessageID of the message schedule name sends
// for the period that starts at periodStart.
func ScheduleMessageID(name string, periodStart time.Time) string {
	return periodID(name, millis(periodStart))
}

func periodID(name string, at int64) string { return fmt.Sprintf("schedule/%s/%d", name, at) }

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

// ScheduleNamespace returns the namespace of a schedule's name: for a name
// of the form "TARGET/NAME", TARGET, the only target such a schedule may
// have; "" for a plain name, which lives in the namespace every schedule
// shares. A namespace keeps the schedules of one target apart from those
// of every other: a broker key that covers some queues only names its
// schedules in the namespaces of their targets, so its names never
// collide with, nor reveal, a schedule it does not cover.
func ScheduleNamespace(name string) string {
	ns, _, ok := strings.Cut(name, "/")
	if !ok {
		return ""
	}
	return ns
}

// validateScheduleName checks a schedule's name: a plain name follows the
// rules of queue names; "TARGET/NAME" has two such parts, and at most
// MaxQueueNameLen bytes in all.
func validateScheduleName(name string) error {
	ns, local, ok := strings.Cut(name, "/")
	if !ok {
		return validateName(ErrInvalidSchedule, name)
	}
	if len(name) > MaxQueueNameLen {
		return invalidf(ErrInvalidSchedule, "%d bytes, at most %d", len(name), MaxQueueNameLen)
	}
	if err := validateName(ErrInvalidSchedule, ns); err != nil {
		return err
	}
	return validateName(ErrInvalidSchedule, local)
}

// resolveSchedule validates opts and returns the row to store (NextAt not
// set) with its periods; now is the store's clock.
func (s *Store) resolveSchedule(name string, o ScheduleOptions, now int64) (driver.Schedule, periods, error) {
	var p periods
	if err := validateScheduleName(name); err != nil {
		return driver.Schedule{}, p, err
	}
	if err := validateQueueName(o.Target); err != nil {
		return driver.Schedule{}, p, err
	}
	if ns := ScheduleNamespace(name); ns != "" && ns != o.Target {
		return driver.Schedule{}, p, invalidf(ErrInvalidSchedule, "schedule %q is in the namespace of %q: its target is %q, not %q",
			name, ns, ns, o.Target)
	}
	r := driver.Schedule{Name: name, Target: o.Target, Cron: strings.TrimSpace(o.Cron), TimeZone: o.TimeZone,
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
	f := driver.Fields{MessageID: periodID(name, now), GroupID: o.GroupID, Subject: o.Subject,
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
	om := driver.SendMessage{Body: r.Body, MessageID: f.MessageID, GroupID: r.GroupID, Subject: r.Subject,
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
