package measure

import (
	"math"
	"testing"
	"time"
)

func TestPercentileAndMedian(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 3}, {99, 5}, {0, 1}, {20, 1}, {21, 2}} {
		if got := Percentile(ds, tc.p); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v", got)
	}
	if got := Median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("Median = %v, want 2.5", got)
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{{1234567, "msgs/s", "1,234,567"}, {999.6, "msgs/s", "1,000"}, {-1234, "x", "-1,234"},
		{1.234, "ms", "1.23"}, {math.NaN(), "ms", "—"}, {12, "msgs/s", "12"}} {
		if got := Cell(tc.v, tc.unit); got != tc.want {
			t.Errorf("Cell(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}
