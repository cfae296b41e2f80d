package mqlite

import (
	"math"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/mqlite/mqlite/internal/driver"
)

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
func compile(r driver.Schedule) (periods, error) {
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
