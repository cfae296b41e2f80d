package mqlite

import (
	"fmt"
	"time"
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
