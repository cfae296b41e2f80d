package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
)

// ErrNoStream is the error of a Streamer's OpenStream when the other side
// cannot stream (a broker older than the streaming receive): Loop then
// claims with Receive instead.
var ErrNoStream = errors.New("consumer: streaming receive not supported")

// streamed is the Store Loop settles through while it streams: its
// settlements go on the open stream, with the others that reach the
// broker meanwhile in one commit, and through the Store's own calls when
// no stream is open or the stream's call failed (a settlement retried
// after it took effect answers from its receipt).
type streamed struct {
	Store
	mu sync.Mutex
	st Stream
}

var _ Store = (*streamed)(nil)

func (s *streamed) set(st Stream) {
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
}

func (s *streamed) stream() Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// CompleteBatch completes on the stream, or through the Store.
func (s *streamed) CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error) {
	if st := s.stream(); st != nil {
		res, err := st.CompleteBatch(ctx, locks)
		if err == nil || ctx.Err() != nil {
			return res, err
		}
	}
	return s.Store.CompleteBatch(ctx, locks)
}

// Complete completes one delivery on the stream, or through the Store.
func (s *streamed) Complete(ctx context.Context, l mqlite.Lock) error {
	res, err := s.CompleteBatch(ctx, []mqlite.Lock{l})
	if err != nil {
		return err
	}
	return res[0]
}

// Abandon gives a delivery back on the stream, or through the Store.
func (s *streamed) Abandon(ctx context.Context, l mqlite.Lock, delay time.Duration) error {
	if st := s.stream(); st != nil {
		err := st.Abandon(ctx, l, delay)
		if err == nil || ctx.Err() != nil || errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, mqlite.ErrInvalidArgument) {
			return err
		}
	}
	return s.Store.Abandon(ctx, l, delay)
}

// AbandonWithReason gives a delivery back with reason as its last error,
// through the Store's own call (the stream's abandon carries no reason),
// then frees the delivery's place in the open stream's window. Without the
// release the broker counts the delivery as unsettled for as long as the
// stream lives: once a window of them failed, it would hand out nothing
// more and Loop would wait for ever.
func (s *streamed) AbandonWithReason(ctx context.Context, l mqlite.Lock, delay time.Duration, reason string) error {
	err := s.Store.AbandonWithReason(ctx, l, delay, reason)
	// Released whatever the outcome: Loop gives the delivery up either
	// way (a failed abandon lets the lease run out).
	s.release(ctx, l)
	return err
}

// Reject dead-letters a delivery on the stream, or through the Store.
func (s *streamed) Reject(ctx context.Context, l mqlite.Lock, reason, description string) error {
	if st := s.stream(); st != nil {
		err := st.Reject(ctx, l, reason, description)
		if err == nil || ctx.Err() != nil || errors.Is(err, mqlite.ErrLockLost) || errors.Is(err, mqlite.ErrInvalidArgument) {
			return err
		}
	}
	return s.Store.Reject(ctx, l, reason, description)
}

// release frees the place of a delivery Loop gives up on (its lease was
// lost) in the open stream's window.
func (s *streamed) release(ctx context.Context, l mqlite.Lock) {
	if st := s.stream(); st != nil {
		_ = st.Release(ctx, l)
	}
}

// streamRetry spaces the attempts to open a stream while the Store
// refuses them: Loop claims with Receive in between, for a delay that grows
// with each refusal in a row.
var streamRetry = Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}

// fetchStream claims through streams of window messages until ctx is
// cancelled (nil) or the queue cannot be read (the error). A stream that
// ends is reopened after a backoff. While the Store refuses to open one
// (a broker whose long-poll slots are all taken answers 503, and a refusal
// can last), Loop claims with Receive for streamRetry's delay, then tries
// a stream again; the first refusal of a run is logged, with why. A Store
// that cannot stream falls back to fetch for good.
func (l *loop) fetchStream(ctx context.Context, sr Streamer, window int) error {
	failures := 0 // streams that ended
	refusals := 0 // opens refused, in a row
	for ctx.Err() == nil {
		st, err := sr.OpenStream(ctx, l.queue, window)
		opened := err == nil
		if opened {
			if refusals > 0 {
				l.log.Info("consumer: stream open again; claiming through it", "refusals", refusals)
			}
			refusals = 0
			l.claimOnComplete.Store(false) // the stream hands out what completions free
			l.streamed.set(st)
			err = l.pump(ctx, st)
			l.streamed.set(nil)
			_ = st.Close()
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoStream) || errors.Is(err, mqlite.ErrInvalidArgument):
			l.log.Info("consumer: the store cannot stream; claiming with Receive", "err", err)
			return l.fetch(ctx)
		case errors.Is(err, mqlite.ErrClosed) || errors.Is(err, mqlite.ErrQueueNotFound):
			return fmt.Errorf("consumer: stream of %s: %w", l.queue, err)
		}
		if !opened {
			refusals++
			if err := l.fetchRefused(ctx, err, refusals); err != nil {
				return err
			}
			continue
		}
		failures++
		wait := receiveRetry.delay(failures)
		l.log.Warn("consumer: stream ended; opening another", "err", err, "failures", failures, "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			return nil
		}
	}
	return nil
}

// fetchRefused claims with Receive for streamRetry's delay after the
// refusals-th refusal in a row to open a stream (err), and logs why: the
// first refusal of a run as a warning, the others at debug level.
func (l *loop) fetchRefused(ctx context.Context, err error, refusals int) error {
	fallback := streamRetry.delay(refusals)
	if refusals == 1 {
		l.log.Warn("consumer: the store refused a stream; claiming with Receive meanwhile",
			"err", err, "stream_again_in", fallback)
	} else {
		l.log.Debug("consumer: the store refused a stream again", "err", err, "refusals", refusals, "stream_again_in", fallback)
	}
	return l.fetchUntil(ctx, time.Now().Add(fallback))
}

// pump hands the stream's messages to the workers, one slot each, until
// the stream ends (its error) or ctx is cancelled (nil). A message that
// finds no slot because Loop is stopping goes back at once.
func (l *loop) pump(ctx context.Context, st Stream) error {
	for {
		msgs, err := st.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, m := range msgs {
			select {
			case <-l.slots:
				l.deliver([]mqlite.Message{m})
			case <-ctx.Done():
				for _, rest := range msgs[i:] {
					sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
					if err := l.set.Abandon(sctx, rest.Lock(), 0); err != nil {
						l.settleFailed(rest, "abandon", err)
					}
					cancel()
				}
				return nil
			}
		}
	}
}
