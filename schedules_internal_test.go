package mqlite

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// TestPeriodsDue: the catch-up arithmetic, for intervals and cron, within
// the CatchUp bound and past it.
func TestPeriodsDue(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	minute := time.Minute.Milliseconds()
	for _, tc := range []struct {
		name       string
		row        driver.Schedule
		from, now  int64
		limit      int
		fire       []int64
		skip, next int64
	}{
		{name: "interval not due", row: driver.Schedule{IntervalMS: minute, AnchorAt: t0},
			from: t0 + minute, now: t0 + minute - 1, limit: 5, next: t0 + minute},
		{name: "interval one", row: driver.Schedule{IntervalMS: minute, AnchorAt: t0},
			from: t0 + minute, now: t0 + minute, limit: 5, fire: []int64{t0 + minute}, next: t0 + 2*minute},
		{name: "interval three behind", row: driver.Schedule{IntervalMS: minute, AnchorAt: t0},
			from: t0 + minute, now: t0 + 3*minute + 7, limit: 5,
			fire: []int64{t0 + minute, t0 + 2*minute, t0 + 3*minute}, next: t0 + 4*minute},
		{name: "interval past the bound", row: driver.Schedule{IntervalMS: minute, AnchorAt: t0},
			from: t0 + minute, now: t0 + 10*minute, limit: 2,
			fire: []int64{t0 + 9*minute, t0 + 10*minute}, skip: 8, next: t0 + 11*minute},
		{name: "cron three behind", row: driver.Schedule{Cron: "*/15 * * * *"},
			from: t0, now: t0 + 30*minute + 1, limit: 5,
			fire: []int64{t0, t0 + 15*minute, t0 + 30*minute}, next: t0 + 45*minute},
		{name: "cron past the bound", row: driver.Schedule{Cron: "@hourly"},
			from: t0, now: t0 + 5*60*minute, limit: 1, fire: []int64{t0 + 5*60*minute}, skip: 5, next: t0 + 6*60*minute},
		{name: "@every on its grid", row: driver.Schedule{Cron: "@every 1m", AnchorAt: t0},
			from: t0 + minute, now: t0 + 2*minute, limit: 5,
			fire: []int64{t0 + minute, t0 + 2*minute}, next: t0 + 3*minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compile(tc.row)
			if err != nil {
				t.Fatal(err)
			}
			fire, skip, next := p.due(tc.from, tc.now, tc.limit)
			if len(fire) != len(tc.fire) || skip != tc.skip || next != tc.next {
				t.Fatalf("due = %v, %d, %d; want %v, %d, %d", fire, skip, next, tc.fire, tc.skip, tc.next)
			}
			for i := range fire {
				if fire[i] != tc.fire[i] {
					t.Fatalf("due fires %v, want %v", fire, tc.fire)
				}
			}
		})
	}
}

// TestPeriodsDueFarBehind: a per-minute cron 40 days behind is walked in
// bounded rounds; together they skip and fire every period exactly once.
func TestPeriodsDueFarBehind(t *testing.T) {
	t.Parallel()
	p, err := compile(driver.Schedule{Cron: "* * * * *"})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2025, 11, 22, 0, 0, 0, 0, time.UTC).UnixMilli()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	total := (now-from)/time.Minute.Milliseconds() + 1
	var skipped, rounds int64
	var fired []int64
	for from <= now {
		fire, skip, next := p.due(from, now, 10)
		if next <= from {
			t.Fatalf("round %d did not advance: %d -> %d", rounds, from, next)
		}
		skipped += skip
		fired = append(fired, fire...)
		from = next
		rounds++
	}
	if skipped+int64(len(fired)) != total || len(fired) != 10 || fired[9] != now {
		t.Fatalf("skipped %d fired %v of %d periods", skipped, fired, total)
	}
	if rounds < 2 {
		t.Fatalf("%d rounds: the walk was not bounded", rounds)
	}
}
