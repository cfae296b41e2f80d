package wire

import (
	"fmt"
	"time"

	"github.com/mqlite/mqlite"
)

// ScheduleOptions is mqlite.ScheduleOptions on the wire; zero values mean
// the defaults.
type ScheduleOptions struct {
	Target     string            `json:"target"`
	Cron       string            `json:"cron,omitempty"`
	TimeZone   string            `json:"time_zone,omitempty"`
	EveryMS    int64             `json:"every_ms,omitempty"`
	Start      time.Time         `json:"start,omitzero"`
	CatchUp    int               `json:"catch_up,omitempty"`
	Body       []byte            `json:"body"`
	GroupID    string            `json:"group_id,omitempty"`
	Subject    string            `json:"subject,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	TTLMS      int64             `json:"ttl_ms,omitempty"`
}

// FromScheduleOptions encodes o.
func FromScheduleOptions(o mqlite.ScheduleOptions) ScheduleOptions {
	return ScheduleOptions{Target: o.Target, Cron: o.Cron, TimeZone: o.TimeZone, EveryMS: o.Every.Milliseconds(),
		Start: o.Start, CatchUp: o.CatchUp, Body: o.Body, GroupID: o.GroupID, Subject: o.Subject,
		Properties: o.Properties, TTLMS: o.TTL.Milliseconds()}
}

// Options decodes o. A missing body is an empty one. A duration whose
// milliseconds overflow a time.Duration is refused (ErrInvalidSchedule,
// ErrInvalidTTL) rather than wrapped around; the store refuses the other
// bad values.
func (o ScheduleOptions) Options() (mqlite.ScheduleOptions, error) {
	body := o.Body
	if body == nil {
		body = []byte{}
	}
	every, err := exactMS(o.EveryMS, mqlite.ErrInvalidSchedule, "every_ms")
	if err != nil {
		return mqlite.ScheduleOptions{}, err
	}
	ttl, err := exactMS(o.TTLMS, mqlite.ErrInvalidTTL, "ttl_ms")
	if err != nil {
		return mqlite.ScheduleOptions{}, err
	}
	return mqlite.ScheduleOptions{Target: o.Target, Cron: o.Cron, TimeZone: o.TimeZone,
		Every: every, Start: o.Start, CatchUp: o.CatchUp, Body: body,
		GroupID: o.GroupID, Subject: o.Subject, Properties: o.Properties, TTL: ttl}, nil
}

// exactMS is ms as a time.Duration, or an error of kind when it does not
// fit in one.
func exactMS(ms int64, kind error, name string) (time.Duration, error) {
	const most = int64(1<<63-1) / int64(time.Millisecond)
	if ms > most || ms < -most {
		return 0, &mqlite.InvalidArgumentError{Kind: kind, Detail: fmt.Sprintf("%s %d overflows a duration", name, ms)}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// CreateScheduleRequest is the body of a schedule creation.
type CreateScheduleRequest struct {
	Name    string          `json:"name"`
	Options ScheduleOptions `json:"options"`
}

// UpdateScheduleRequest is the body of a schedule update: the new options.
type UpdateScheduleRequest struct {
	Options ScheduleOptions `json:"options"`
}

// Schedule is mqlite.ScheduleInfo on the wire.
type Schedule struct {
	Name      string          `json:"name"`
	Options   ScheduleOptions `json:"options"`
	NextAt    time.Time       `json:"next_at,omitzero"`
	LastAt    time.Time       `json:"last_at,omitzero"`
	Fired     int64           `json:"fired"`
	Skipped   int64           `json:"skipped"`
	LastError string          `json:"last_error,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// FromSchedule encodes s.
func FromSchedule(s mqlite.ScheduleInfo) Schedule {
	return Schedule{Name: s.Name, Options: FromScheduleOptions(s.Options), NextAt: s.NextAt, LastAt: s.LastAt,
		Fired: s.Fired, Skipped: s.Skipped, LastError: s.LastError, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// ScheduleInfo decodes s.
func (s Schedule) ScheduleInfo() (mqlite.ScheduleInfo, error) {
	o, err := s.Options.Options()
	return mqlite.ScheduleInfo{Name: s.Name, Options: o, NextAt: s.NextAt, LastAt: s.LastAt,
		Fired: s.Fired, Skipped: s.Skipped, LastError: s.LastError, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}, err
}

// Size is what the schedule counts against an answer's byte budget: its
// message's body and metadata.
func (s Schedule) Size() int64 {
	n := len(s.Options.Body) + len(s.Options.GroupID) + len(s.Options.Subject)
	for k, v := range s.Options.Properties {
		n += len(k) + len(v)
	}
	return int64(n)
}

// SchedulesResponse is the response of the schedule listing: one page.
// NextAfter, when set, is the last name of a page the byte budget cut:
// the next page is the listing with after=NextAfter.
type SchedulesResponse struct {
	Schedules []Schedule `json:"schedules"`
	NextAfter string     `json:"next_after,omitempty"`
}
