package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
)

// settle settles d by its handler's outcome err, LoopTx's successes by
// commitStep. It reports whether d's slot was handed over: to the
// completer, which then frees it, or to next, the message LoopTx's commit
// claimed (d's process span is then ended).
func (l *loop) settle(d *delivery, err error, took time.Duration) (handedOver bool, next *delivery) {
	lost := l.renewals.remove(d) // no renewal may race the settlement
	drainCancelled := errors.Is(context.Cause(d.ctx), ErrDrainTimeout)
	d.cancel(context.Canceled)
	if lost != nil {
		l.log.Warn("consumer: handler finished after its lease was lost; not settling",
			append(msgAttrs(d.msg), "handler_err", err, "took", took)...)
		l.forget(d)
		return false, nil
	}
	sctx, cancel := context.WithTimeout(l.sctx, l.o.SettleTimeout)
	defer cancel()
	if d.span != nil {
		sctx = trace.ContextWithSpan(sctx, d.span) // the settle span is the process span's child
	}
	m := d.msg
	fromTx := err == nil && l.txHandler != nil // then err becomes the step's or its commit's
	if fromTx {
		var settled bool
		if next, settled, err = l.commitStep(sctx, d, took); settled {
			return next != nil, next
		}
	}
	switch {
	case err == nil: // Loop and LoopBatch: the completer completes in batches
		l.completions <- completion{msg: m, took: took, span: d.span} // never blocks: room for every slot
		return true, nil
	case programmingError(err) || fromTx && refused(err):
		l.deadLetterAtOnce(sctx, m, took, err)
	case IsPermanent(err):
		why, description := deadLetterOf(err)
		if serr := l.set.Reject(sctx, m.Lock(), why, description); serr != nil {
			l.settleFailed(m, "reject", serr)
			return false, nil
		}
		l.log.Warn("consumer: permanent error; message dead-lettered", append(msgAttrs(m), "err", err)...)
		l.o.Observer.Rejected(m, took, err)
	default:
		var delay time.Duration
		if !drainCancelled {
			delay = l.retryDelay(m, err)
		}
		if serr := l.abandon(sctx, m, delay, err); serr != nil {
			l.settleFailed(m, "abandon", serr)
			return false, nil
		}
		l.log.Info("consumer: handler failed; message abandoned", append(msgAttrs(m), "err", err, "delay", delay)...)
		l.o.Observer.Abandoned(m, took, delay, err)
	}
	return false, nil
}

// deadLetterAtOnce dead-letters m, whose handler, step or commit failed
// with err, a programming error or a refusal of what the step wrote: no
// delivery would end otherwise, and a retry would repeat the handler's
// side effects. A programming error also stops Loop, which returns it.
func (l *loop) deadLetterAtOnce(ctx context.Context, m mqlite.Message, took time.Duration, err error) {
	stop := programmingError(err)
	if stop {
		l.fail(fmt.Errorf("consumer: %s: message %d: programming error, the loop stops: %w", l.queue, m.Seq, err))
	}
	if serr := l.set.Reject(ctx, m.Lock(), reason(err), notRetried); serr != nil {
		l.settleFailed(m, "reject", serr)
		return
	}
	if stop {
		l.log.Error("consumer: programming error: message dead-lettered at once, not retried; the loop stops",
			append(msgAttrs(m), "err", err)...)
	} else {
		l.log.Error("consumer: the step's writes were refused as invalid: message dead-lettered at once, not retried",
			append(msgAttrs(m), "err", err)...)
	}
	l.o.Observer.Rejected(m, took, err)
}

// abandon gives m back after delay, with the handler's error as its last
// error.
func (l *loop) abandon(ctx context.Context, m mqlite.Message, delay time.Duration, err error) error {
	// Through what Loop settles with: while a stream is open, streamed
	// abandons through the source's own call and frees the stream's place.
	return l.set.AbandonWithReason(ctx, m.Lock(), delay, cut(err.Error(), mqlite.MaxLastErrorLen))
}

// reason turns a permanent error into a dead-letter reason the store takes:
// valid UTF-8, cut to mqlite.MaxReasonLen bytes.
func reason(err error) string { return cut(err.Error(), mqlite.MaxReasonLen) }

// cut makes s valid UTF-8 and cuts it to at most n bytes, on a rune
// boundary.
func cut(s string, n int) string {
	r := strings.ToValidUTF8(s, "\uFFFD")
	if len(r) <= n {
		return r
	}
	r = r[:n]
	for !utf8.ValidString(r) { // a rune cut in half
		r = r[:len(r)-1]
	}
	return r
}

func (l *loop) settleFailed(m mqlite.Message, op string, err error) {
	if errors.Is(err, mqlite.ErrLockLost) {
		l.log.Warn("consumer: lease lost before settlement", append(msgAttrs(m), "op", op, "err", err)...)
		l.o.Observer.LockLost(m, err)
		return
	}
	l.log.Error("consumer: settlement failed; the message comes back when its lease ends",
		append(msgAttrs(m), "op", op, "err", err)...)
	l.o.Observer.SettleFailed(m, err)
}

func msgAttrs(m mqlite.Message) []any {
	return []any{"seq", m.Seq, "message_id", m.MessageID, "delivery_count", m.DeliveryCount}
}
