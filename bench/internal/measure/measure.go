// Package measure holds what the benchmark commands of this module share:
// the bodies and their sending, Poisson arrivals, medians and percentiles,
// the table's cells and the machine's description.
package measure

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Bodies returns n distinct random bodies of size printable ASCII bytes
// (so that a side that stores JSON carries them as they are).
func Bodies(rng *rand.Rand, n, size int) [][]byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size)
		for j := range b {
			b[j] = letters[rng.IntN(len(letters))]
		}
		out[i] = b
	}
	return out
}

// SendAll sends bs with send, per at a time.
func SendAll(ctx context.Context, send func(context.Context, [][]byte) error, bs [][]byte, per int) error {
	for len(bs) > 0 {
		n := min(per, len(bs))
		if err := send(ctx, bs[:n]); err != nil {
			return err
		}
		bs = bs[n:]
	}
	return nil
}

// SendRate sends bs with send, per at a time, and returns the messages a
// second.
func SendRate(ctx context.Context, send func(context.Context, [][]byte) error, bs [][]byte, per int) (float64, error) {
	start := time.Now()
	if err := SendAll(ctx, send, bs, per); err != nil {
		return 0, err
	}
	return float64(len(bs)) / time.Since(start).Seconds(), nil
}

// Arrivals returns n Poisson arrival offsets at rate per second.
func Arrivals(rng *rand.Rand, n int, rate float64) []time.Duration {
	at := make([]time.Duration, n)
	var t float64
	for i := range at {
		t += rng.ExpFloat64() / rate
		at[i] = time.Duration(t * float64(time.Second))
	}
	return at
}

// Percentile returns the p-th percentile (0..100) of ds, nearest rank; 0
// for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Median returns the median of xs, NaN for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Cell formats a table's cell: "—" for NaN, two decimals for
// milliseconds, a whole number with thousands separators otherwise.
func Cell(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case unit == "ms":
		return fmt.Sprintf("%.2f", v)
	default:
		return Commas(v)
	}
}

// Commas rounds v to a whole number and writes it with a comma between
// each group of three digits.
func Commas(v float64) string {
	s := fmt.Sprint(int64(math.Round(v)))
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return sign + b.String()
}

// CPUModel is the first "model name" of /proc/cpuinfo, or "unknown CPU".
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// LoadAverage is the one-minute load average (/proc/loadavg), or "?".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
