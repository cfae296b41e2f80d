package mqlite

import "time"

// Clock is the source of "now" for every timestamp mqlite writes: leases,
// schedules, TTLs, dedup windows and receipts. Tests inject a fake clock and
// move it instead of sleeping. Implementations must be safe for concurrent
// use.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock; it is the default Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// millis is how mqlite stores time: epoch milliseconds.
func millis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis turns stored epoch milliseconds back into a time.Time; 0 is the
// zero time.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
