package tally

import "time"

// Buckets are the upper bounds of every Histogram, in increasing order:
// 100µs to 10s.
var Buckets = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// Histogram is a histogram of durations over Buckets (the store's
// DurationHistogram, field for field).
type Histogram struct {
	// Buckets[i] is the number of observations at most Buckets[i]:
	// cumulative, like Prometheus buckets.
	Buckets []uint64
	// Count is the number of observations; Sum their total.
	Count uint64
	Sum   time.Duration
}

// histogram is the live form of a Histogram: a count per bucket (not
// cumulative) plus one for past the last bound.
type histogram struct {
	counts [len(Buckets) + 1]uint64
	sum    time.Duration
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(Buckets) && d > Buckets[i] {
		i++
	}
	h.counts[i]++
	h.sum += d
}

func (h *histogram) export() Histogram {
	out := Histogram{Buckets: make([]uint64, len(Buckets)), Sum: h.sum}
	for i, n := range h.counts {
		out.Count += n
		if i < len(Buckets) {
			out.Buckets[i] = out.Count
		}
	}
	return out
}
