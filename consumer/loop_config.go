package consumer

import (
	"log/slog"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
)

// Defaults of LoopConfig's zero-valued fields.
const (
	DefaultDrainTimeout  = 30 * time.Second
	DefaultSettleTimeout = 5 * time.Second
)

// LoopConfig configures Loop. The zero value is ready to use.
type LoopConfig struct {
	// Concurrency is how many handlers run at once. Defaults to 1.
	Concurrency int
	// Prefetch is how many claimed messages may wait for a free handler, so
	// that the next message is at hand when a handler finishes. Loop claims
	// in batches of up to Concurrency+Prefetch messages, and keeps renewing
	// the leases of those that wait. Defaults to Concurrency; -1 for none.
	Prefetch int
	// Backoff sets the delay before a failed message comes again.
	// Defaults to the Backoff defaults.
	Backoff Backoff
	// DrainTimeout is how long, once ctx is cancelled, Loop lets running
	// handlers finish before it cancels their ctx. Defaults to 30s; -1
	// cancels them at once.
	DrainTimeout time.Duration
	// SettleTimeout bounds each settlement and renewal. Settlements run
	// under context.WithoutCancel(ctx), so a stopping Loop still delivers
	// the ack of a handler that finished. Defaults to 5s.
	SettleTimeout time.Duration
	// Logger receives Loop's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer receives Loop's events, for metrics. Defaults to none.
	Observer Observer
}

func (o LoopConfig) withDefaults() (LoopConfig, error) {
	var err error
	if o.Concurrency, err = setting.Default("Concurrency", o.Concurrency, 1); err != nil || o.Concurrency > mqlite.MaxReceiveBatch {
		return o, invalid("Concurrency %d, want 1 to %d", o.Concurrency, mqlite.MaxReceiveBatch)
	}
	if o.Prefetch, err = setting.DefaultOrOff("Prefetch", o.Prefetch, o.Concurrency, 0); err != nil {
		return o, invalid("%v", err)
	}
	if o.Prefetch > mqlite.MaxReceiveBatch {
		return o, invalid("Prefetch %d, want 1 to %d or -1 for none", o.Prefetch, mqlite.MaxReceiveBatch)
	}
	if o.Backoff, err = o.Backoff.withDefaults(); err != nil {
		return o, err
	}
	if o.DrainTimeout, err = setting.DefaultOrOff("DrainTimeout", o.DrainTimeout, DefaultDrainTimeout, 0); err != nil {
		return o, invalid("%v", err)
	}
	if o.SettleTimeout, err = setting.Default("SettleTimeout", o.SettleTimeout, DefaultSettleTimeout); err != nil {
		return o, invalid("%v", err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	return o, nil
}
