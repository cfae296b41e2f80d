package consumer_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	exact := consumer.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -1}
	for _, tc := range []struct {
		name  string
		b     consumer.Backoff
		count int
		want  time.Duration
	}{
		{"first delivery", exact, 1, time.Second},
		{"second", exact, 2, 2 * time.Second},
		{"third", exact, 3, 4 * time.Second},
		{"sixth", exact, 6, 32 * time.Second},
		{"capped", exact, 7, time.Minute},
		{"far past the cap", exact, 10_000, time.Minute},
		{"count zero counts as first", exact, 0, time.Second},
		{"multiplier 1.5", consumer.Backoff{Initial: 100 * time.Millisecond, Max: time.Hour, Multiplier: 1.5, Jitter: -1}, 3, 225 * time.Millisecond},
		{"constant", consumer.Backoff{Initial: time.Second, Max: time.Hour, Multiplier: 1, Jitter: -1}, 500, time.Second},
		{"no delay", consumer.Backoff{Initial: -1}, 5, 0},
		{"defaults without jitter", consumer.Backoff{Jitter: -1}, 3, 4 * time.Second},
		{"default cap", consumer.Backoff{Jitter: -1}, 100, consumer.DefaultBackoffMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.count); got != tc.want {
				t.Fatalf("Delay(%d) = %v, want %v", tc.count, got, tc.want)
			}
		})
	}
}

func TestBackoffJitterStaysInBounds(t *testing.T) {
	t.Parallel()
	b := consumer.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.25}
	for count := 1; count <= 8; count++ {
		base := min(time.Second<<(count-1), time.Minute)
		lo, hi := base-base/4, base+base/4+1
		seen := map[time.Duration]bool{}
		for range 200 {
			d := b.Delay(count)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", count, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("Delay(%d) took only %d values in 200 draws: no jitter", count, len(seen))
		}
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	err := fmt.Errorf("handle: %w", consumer.Permanent(base))
	if !consumer.IsPermanent(err) || !errors.Is(err, base) || err.Error() != "handle: bad input" {
		t.Fatalf("Permanent: %v", err)
	}
	if consumer.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
	if consumer.IsPermanent(base) || consumer.IsPermanent(nil) {
		t.Fatal("IsPermanent of a plain error")
	}
}

// TestLoopRejectReason: a permanent error's text becomes a reason the
// store accepts: valid UTF-8 and at most mqlite.MaxReasonLen bytes.
func TestLoopRejectReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		want int // length of the reason
	}{
		{"short", "boom", 4},
		{"long", strings.Repeat("x", mqlite.MaxReasonLen+10), mqlite.MaxReasonLen},
		{"rune cut at the limit", strings.Repeat("x", mqlite.MaxReasonLen-1) + "é", mqlite.MaxReasonLen - 1},
		{"not UTF-8", "bad \xff byte", len("bad \uFFFD byte")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := consumer.ReasonOf(errors.New(tc.text))
			if len(got) != tc.want || !utf8.ValidString(got) {
				t.Fatalf("reason of %d bytes (valid %v), want %d", len(got), utf8.ValidString(got), tc.want)
			}
		})
	}
}
