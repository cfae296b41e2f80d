package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
)

// minRenewRetry is the shortest wait before renewing again after a renewal
// failed for a reason other than a lost lock.
const minRenewRetry = 10 * time.Millisecond

// minRenewEvery is the shortest wait between two renewals of a lease. Half
// the shortest lease (mqlite.MinLockDuration) is well above it; it only
// keeps a Store whose clock runs ahead of its leases (every lease looks
// over already) from renewing in a tight loop.
const minRenewEvery = 40 * time.Millisecond

// renewer holds the deliveries a Loop holds, waiting or running, and renews
// their leases in batches (one RenewBatch per due moment), each at half its
// remaining lease. Only Loop's renew goroutine renews; add and remove are
// called from the fetcher and the workers.
type renewer struct {
	mu   sync.Mutex
	held map[*delivery]struct{}
	kick chan struct{} // a delivery was added: look at the timer again
}

func newRenewer() *renewer {
	return &renewer{held: map[*delivery]struct{}{}, kick: make(chan struct{}, 1)}
}

// halfway is the moment halfway between now and until, but at least
// minRenewEvery after now.
func halfway(now, until time.Time) time.Time {
	return now.Add(max(until.Sub(now)/2, minRenewEvery))
}

// add starts renewing d; now is when its lease was read.
func (r *renewer) add(d *delivery, now time.Time) {
	if d.until.IsZero() {
		return // no lease to keep
	}
	r.mu.Lock()
	d.renewAt = halfway(now, d.until)
	r.held[d] = struct{}{}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// remove stops renewing d, before its settlement, so that no renewal races
// the settlement. It returns why the lease was lost, if a renewal found it
// lost; then d must not be settled.
func (r *renewer) remove(d *delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, d)
	return d.lost
}

// next returns the earliest renewal moment, false when nothing is held.
func (r *renewer) next() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for d := range r.held {
		if first.IsZero() || d.renewAt.Before(first) {
			first = d.renewAt
		}
	}
	return first, !first.IsZero()
}

// renew is the renew goroutine: it sleeps until the next renewal moment
// (or until a delivery is added) and renews what is due, until ctx ends.
func (l *loop) renew(ctx context.Context) {
	r := l.renewals
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if at, ok := r.next(); ok {
			timer.Reset(max(at.Sub(l.clock.Now()), 0))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
			l.renewDue(ctx)
		}
	}
}

// renewDue renews, in one RenewBatch, every held lease whose renewal moment
// has come. A lease found lost cancels its handler's ctx with a cause that
// matches mqlite.ErrLockLost.
func (l *loop) renewDue(ctx context.Context) {
	r := l.renewals
	now := l.clock.Now()
	var due []*delivery
	var locks []mqlite.Lock
	r.mu.Lock()
	for d := range r.held {
		if !d.renewAt.After(now) {
			due = append(due, d)
			locks = append(locks, d.msg.Lock())
		}
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, l.o.SettleTimeout)
	res, err := l.src.RenewBatch(rctx, locks)
	cancel()
	if err == nil && len(res) != len(locks) {
		err = fmt.Errorf("consumer: RenewBatch returned %d results for %d locks", len(res), len(locks))
	}
	now = l.clock.Now()
	var lost []*delivery
	r.mu.Lock()
	for i, d := range due {
		if _, ok := r.held[d]; !ok {
			continue // settled meanwhile: the result is moot
		}
		rerr := err
		if rerr == nil {
			rerr = res[i].Err
		}
		switch {
		case rerr == nil:
			d.until = res[i].LockedUntil
			d.renewAt = halfway(now, d.until)
		case errors.Is(rerr, mqlite.ErrLockLost):
			d.lost = fmt.Errorf("consumer: lease of %s/%d lost: %w", d.msg.Queue, d.msg.Seq, rerr)
			delete(r.held, d)
			lost = append(lost, d)
		default:
			// Try again while the lease lasts; once it has ended, the
			// next attempt finds the lock lost.
			d.renewAt = now.Add(max(d.until.Sub(now)/2, minRenewRetry))
			if ctx.Err() == nil {
				l.log.Warn("consumer: lease renewal failed; retrying", append(msgAttrs(d.msg), "err", rerr)...)
			}
		}
	}
	r.mu.Unlock()
	for _, d := range lost {
		l.log.Warn("consumer: lease lost; cancelling the handler", append(msgAttrs(d.msg), "err", d.lost)...)
		d.cancel(d.lost)
		l.o.Observer.LockLost(d.msg, d.lost)
	}
}
