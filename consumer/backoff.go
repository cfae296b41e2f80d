package consumer

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
)

// Defaults of Backoff's zero-valued fields.
const (
	DefaultBackoffInitial    = time.Second
	DefaultBackoffMax        = 5 * time.Minute
	DefaultBackoffMultiplier = 2.0
	DefaultBackoffJitter     = 0.2
)

// Backoff is how long Loop leaves a message alone after its handler failed:
// an exponential backoff with jitter, keyed on the message's DeliveryCount,
// so the delay grows with each redelivery without Loop keeping any state.
// The zero value means the defaults.
type Backoff struct {
	// Initial is the delay after the first delivery failed. Defaults to 1s;
	// -1 abandons failed messages with no delay at all.
	Initial time.Duration
	// Max caps the delay before jitter. Defaults to 5 minutes.
	Max time.Duration
	// Multiplier is the growth from one delivery to the next. Defaults to
	// 2; at least 1.
	Multiplier float64
	// Jitter spreads each delay uniformly over ±Jitter of itself, so
	// messages that failed together do not all come back together.
	// Defaults to 0.2; -1 turns it off (exact delays); at most 1.
	Jitter float64
}

func (b Backoff) withDefaults() (Backoff, error) {
	var err error
	// -1 stays -1: Delay reads it as no delay.
	if b.Initial, err = setting.DefaultOrOff("Backoff.Initial", b.Initial, DefaultBackoffInitial, -1); err != nil {
		return b, invalid("%v", err)
	}
	if b.Max, err = setting.Default("Backoff.Max", b.Max, DefaultBackoffMax); err != nil {
		return b, invalid("%v", err)
	}
	if b.Initial > b.Max {
		return b, invalid("Backoff.Initial %v above Backoff.Max %v", b.Initial, b.Max)
	}
	switch {
	case b.Multiplier == 0:
		b.Multiplier = DefaultBackoffMultiplier
	case b.Multiplier < 1 || math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0):
		return b, invalid("Backoff.Multiplier %v, want at least 1", b.Multiplier)
	}
	if b.Jitter, err = setting.DefaultOrOff("Backoff.Jitter", b.Jitter, DefaultBackoffJitter, 0); err != nil {
		return b, invalid("%v", err)
	}
	if b.Jitter > 1 || math.IsNaN(b.Jitter) {
		return b, invalid("Backoff.Jitter %v, want 0 to 1 or -1 for none", b.Jitter)
	}
	return b, nil
}

// Delay returns the delay before delivery deliveryCount+1, after delivery
// deliveryCount (1 for the first) failed: Initial × Multiplier^(deliveryCount-1),
// capped at Max, then spread by ±Jitter. With the jitter off it is exact,
// so the n-th delay is a pure function of n. Zero-valued fields mean their
// defaults; invalid fields are treated as their defaults here (Loop
// rejects them up front). Delay is safe for concurrent use.
func (b Backoff) Delay(deliveryCount int) time.Duration {
	b, err := b.withDefaults()
	if err != nil {
		b, _ = Backoff{}.withDefaults()
	}
	return b.delay(deliveryCount)
}

// delay is Delay for resolved options.
func (b Backoff) delay(deliveryCount int) time.Duration {
	if b.Initial < 0 {
		return 0
	}
	// The library's ExponentialBackOff steps an interval that grows with
	// each NextBackOff and randomizes only the value it returns. Step it
	// without randomness to the interval of this delivery (it stops
	// growing at Max, so this takes a few dozen steps at most), then
	// randomize that one value.
	eb := &backoff.ExponentialBackOff{
		InitialInterval: b.Initial,
		Multiplier:      b.Multiplier,
		MaxInterval:     b.Max,
		Stop:            backoff.Stop,
		Clock:           backoff.SystemClock,
	}
	eb.Reset()
	for i := 1; i < deliveryCount; i++ {
		if eb.NextBackOff() >= b.Max {
			break
		}
	}
	eb.RandomizationFactor = b.Jitter
	return eb.NextBackOff()
}

// PermanentError marks a handler error that retrying cannot fix: Loop
// dead-letters the message at once, with the error's text as the reason.
// Create one with Permanent.
type PermanentError struct {
	Err error
}

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that Loop rejects the message to the dead letters
// instead of abandoning it for a retry. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is, or wraps, a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("consumer: %w: %s", mqlite.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
