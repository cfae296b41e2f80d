package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mqlite/mqlite"
)

// receiveWait bounds one Receive of Loop. Commits and due moments wake the
// Receive at once, so this is not a polling interval: an idle Loop issues
// one claim per receiveWait.
const receiveWait = time.Minute

// receiveRetry spaces the Receives that follow a failed one.
var receiveRetry = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.2}

// fetch claims messages into l.work until ctx is cancelled (nil) or
// Receive fails for good (the error).
func (l *loop) fetch(ctx context.Context) error { return l.fetchUntil(ctx, time.Time{}) }

// fetchUntil is fetch that also returns (nil) once until passes, unless
// until is zero: no Receive of it waits past until.
func (l *loop) fetchUntil(ctx context.Context, until time.Time) error {
	if l.batch == nil {
		l.claimOnComplete.Store(true) // the completer claims too; a stream does not need it
	}
	var end <-chan time.Time // nil: never
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		end = t.C
	}
	failures := 0
	for {
		select {
		case <-l.slots:
		case <-ctx.Done():
			return nil
		case <-end:
			return nil
		}
		n := 1
	more:
		for n < mqlite.MaxReceiveBatch {
			select {
			case <-l.slots:
				n++
			default:
				break more
			}
		}
		wait := receiveWait
		if !until.IsZero() {
			wait = min(wait, max(time.Until(until), 0))
		}
		msgs, err := l.src.Receive(ctx, l.queue, mqlite.ReceiveOptions{Max: n, Wait: wait})
		for range n - len(msgs) {
			l.slots <- struct{}{}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, mqlite.ErrClosed) || errors.Is(err, mqlite.ErrQueueNotFound) ||
				errors.Is(err, mqlite.ErrInvalidArgument) {
				return fmt.Errorf("consumer: receive from %s: %w", l.queue, err)
			}
			failures++
			retry := receiveRetry.delay(failures)
			l.log.Warn("consumer: receive failed; retrying", "err", err, "failures", failures, "retry_in", retry)
			if !sleepCtx(ctx, retry) {
				return nil
			}
			continue
		}
		failures = 0
		if len(msgs) == 0 {
			continue
		}
		l.deliver(msgs)
	}
}

// deliver hands claimed messages, each holding a slot, to the workers, or,
// once Loop is stopping, gives them back at once. feed orders it with the
// closing of l.work.
func (l *loop) deliver(msgs []mqlite.Message) {
	l.o.Observer.Received(l.queue, len(msgs))
	l.feed.Lock()
	defer l.feed.Unlock()
	stopping := l.stopping()
	for _, m := range msgs {
		d := l.newDelivery(m)
		if stopping {
			l.release(d)
			continue
		}
		l.renewals.add(d, l.clock.Now())
		l.work <- d // never blocks: l.work has room for every slot
	}
}

// newDelivery is the delivery of a claimed message m, its handler's ctx
// a child of hctx.
func (l *loop) newDelivery(m mqlite.Message) *delivery {
	d := &delivery{msg: m, until: m.LockedUntil}
	d.ctx, d.cancel = context.WithCancelCause(l.hctx)
	return d
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// releaseWaiting gives back the claimed messages that no handler has
// taken yet.
func (l *loop) releaseWaiting() {
	for {
		select {
		case d := <-l.work:
			l.release(d)
		default:
			return
		}
	}
}

// release gives back a message whose handler never started: through
// Release when the Store is a Releaser (the delivery does not count),
// else by Abandon with no delay.
func (l *loop) release(d *delivery) {
	defer func() { l.slots <- struct{}{} }()
	lost := l.renewals.remove(d)
	d.cancel(context.Canceled)
	if lost != nil {
		l.forget(d)
		return // the renewer reported it
	}
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	if r, ok := l.src.(Releaser); ok {
		// No handler saw d: its delivery does not count. Through the
		// Store's own call (a stream carries no release of a
		// delivery), then d's place in an open stream's window is freed.
		err := r.Release(sctx, d.msg.Lock())
		l.forget(d)
		if err != nil {
			l.settleFailed(d.msg, "release", err)
			return
		}
	} else if err := l.set.Abandon(sctx, d.msg.Lock(), 0); err != nil {
		l.settleFailed(d.msg, "abandon", err)
		return
	}
	l.log.Debug("consumer: released unstarted message", msgAttrs(d.msg)...)
	l.o.Observer.Abandoned(d.msg, 0, 0, nil)
}

// forget frees, in the open stream's window, the place of a delivery whose
// lease was lost: Loop does not settle it.
func (l *loop) forget(d *delivery) {
	if l.streamed == nil {
		return
	}
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	l.streamed.release(sctx, d.msg.Lock())
}
