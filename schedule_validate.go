package mqlite

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

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
