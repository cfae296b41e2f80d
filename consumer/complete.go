package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
)

var errShortBatch = errors.New("consumer: CompleteBatch returned fewer results than locks")

// completion is a message whose handler succeeded, waiting to be completed.
type completion struct {
	msg  mqlite.Message
	took time.Duration
	span trace.Span // the process span, ended here; nil when tracing is off
}

// complete is the completer goroutine: it completes what the workers hand
// over, in batches of whatever has gathered, until l.completions is closed
// and drained. It frees each message's slot once the message is settled.
func (l *loop) complete(bc Store) {
	batch := make([]completion, 0, cap(l.completions))
	locks := make([]mqlite.Lock, 0, cap(l.completions))
	for c := range l.completions {
		batch, locks = append(batch[:0], c), append(locks[:0], c.msg.Lock())
	more:
		for len(batch) < mqlite.MaxReceiveBatch {
			select {
			case c, ok := <-l.completions:
				if !ok {
					break more
				}
				batch, locks = append(batch, c), append(locks, c.msg.Lock())
			default:
				break more
			}
		}
		if l.claimOnComplete.Load() && !l.stopping() {
			l.completeAndReceive(l.src, batch, locks)
			continue
		}
		l.completeBatch(bc, batch, locks)
		for range batch {
			l.slots <- struct{}{}
		}
	}
}

// completeAndReceive settles one batch and, in the same call, claims up to
// as many messages as it frees slots: those it got keep their slots and go
// to the workers, the rest are freed. When the call fails as a whole it
// falls back to completeBatch, then takes back what its claim may have
// taken (reclaim).
func (l *loop) completeAndReceive(cr Store, batch []completion, locks []mqlite.Lock) {
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	sctx = settleParent(sctx, batch)
	opts := mqlite.ReceiveOptions{Max: len(batch)}
	if _, store := cr.(*mqlite.Store); !store {
		opts.AttemptID = newAttemptID() // a store's failed call claimed nothing: it rolled back
	}
	res, msgs, err := cr.CompleteAndReceive(sctx, l.queue, locks, opts)
	if err == nil && (len(res) != len(locks) || len(msgs) > len(batch)) {
		err = errShortBatch
	}
	if err != nil {
		l.log.Warn("consumer: complete-and-receive failed; completing alone", "err", err)
		l.completeBatch(cr, batch, locks)
		l.reclaim(cr, opts)
		return
	}
	for i, c := range batch {
		if c.span != nil {
			tracing.End(c.span, res[i])
		}
		if res[i] != nil {
			l.settleFailed(c.msg, "complete", res[i])
			continue
		}
		l.o.Observer.Completed(c.msg, c.took)
	}
	for range len(batch) - len(msgs) {
		l.slots <- struct{}{}
	}
	if len(msgs) > 0 {
		l.deliver(msgs)
	}
}

// completeBatch settles one batch and reports each message's outcome. When
// the whole call fails, it completes the messages one by one, so each gets
// its own outcome.
func (l *loop) completeBatch(bc Store, batch []completion, locks []mqlite.Lock) {
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	sctx = settleParent(sctx, batch)
	res, err := bc.CompleteBatch(sctx, locks)
	if err == nil && len(res) != len(locks) {
		err = errShortBatch
	}
	for i, c := range batch {
		var serr error
		if err == nil {
			serr = res[i]
		} else {
			serr = l.set.Complete(sctx, locks[i])
		}
		if c.span != nil {
			tracing.End(c.span, serr)
		}
		if serr != nil {
			l.settleFailed(c.msg, "complete", serr)
			continue
		}
		l.o.Observer.Completed(c.msg, c.took)
	}
}

// reclaim takes back what a failed CompleteAndReceive with opts may have
// claimed (its answer lost over the network): a Receive with the same
// attempt id replays that claim, the same messages on the same delivery,
// rather than leave them held by nobody until their leases end (a
// delivery spent each). When the call claimed nothing, it is a plain
// claim. What it gets keeps its slots and goes to the workers; the other
// slots of the batch (opts.Max) are freed.
func (l *loop) reclaim(src Store, opts mqlite.ReceiveOptions) {
	var msgs []mqlite.Message
	if opts.AttemptID != "" {
		rctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
		got, err := src.Receive(rctx, l.queue, opts)
		cancel()
		switch {
		case err != nil:
			l.log.Warn("consumer: taking back the claim of a failed complete-and-receive failed; its messages come back when their leases end", "err", err)
		case len(got) <= opts.Max:
			msgs = got
		}
	}
	for range opts.Max - len(msgs) {
		l.slots <- struct{}{}
	}
	if len(msgs) > 0 {
		l.deliver(msgs)
	}
}

// newAttemptID returns 128 random bits in hex.
func newAttemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
