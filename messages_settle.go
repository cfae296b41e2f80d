package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/receivers"
	"github.com/mqlite/mqlite/internal/tally"
	"github.com/mqlite/mqlite/internal/tracing"
)

// settle runs one fenced settlement in its own transaction: on PostgreSQL
// one statement in autocommit (alone), which a replay follows with the
// look at its receipt.
func (s *Store) settle(ctx context.Context, st driver.Settlement, l Lock) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateLock(l); err != nil {
		return err
	}
	st.Queue, st.Seq, st.Token = l.Queue, l.Seq, l.Token
	if st.Op == driver.OpAbandon || st.Op == driver.OpReject {
		st.Worker = WorkerOf(ctx)
	}
	start := time.Now()
	defer s.tally.Observe(l.Queue, tally.Settle, start)
	span := s.startSettle(ctx, string(st.Op), l.Queue, 1)
	err := s.alone(ctx, func(ctx context.Context, db driver.DBTX) error {
		st.Now = s.now() // sampled once the connection is ours
		s.tally.Tag(causeOf(st.Op))
		return s.eng.Settle(ctx, db, st)
	})
	endSettle(span, err)
	if err == nil || errors.Is(err, ErrLockLost) {
		s.receivers.Settled(l.Queue, l.Seq, l.Token)
	}
	return err
}

// Complete settles a delivered message as handled: it leaves the queue, and
// no read of the store shows it again. It needs the delivery's current
// token and a lease still running (ErrLockLost otherwise). Retrying the
// exact same Complete after it succeeded (the reply was lost) succeeds
// again, for about 30 minutes: the store keeps the completed message's row
// (body dropped) as the receipt until the janitor's next pass turns it
// into a receipt row.
func (s *Store) Complete(ctx context.Context, l Lock) error {
	return s.settle(ctx, driver.Settlement{Op: driver.OpComplete}, l)
}

// CompleteBatch completes several deliveries in one transaction (one
// commit; on PostgreSQL one statement, with no BEGIN or COMMIT). Each lock
// gets its own result, nil or ErrLockLost, exactly as Complete would give
// it; err is for failures of the whole call.
func (s *Store) CompleteBatch(ctx context.Context, locks []Lock) ([]error, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	sets := make([]driver.Settlement, len(locks))
	for i, l := range locks {
		if err := validateLock(l); err != nil {
			return nil, err
		}
		sets[i] = driver.Settlement{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
	}
	var span trace.Span
	if len(locks) > 0 {
		span = s.startSettle(ctx, string(driver.OpComplete), locks[0].Queue, len(locks))
	}
	var out []error
	start := time.Now()
	err := s.alone(ctx, func(ctx context.Context, db driver.DBTX) error {
		s.tally.Tag(tally.Complete)
		var err error
		out, err = s.eng.CompleteMany(ctx, db, sets, s.now())
		return err
	})
	for i, l := range locks {
		s.tally.Observe(l.Queue, tally.Settle, start)
		if err == nil && i < len(out) && (out[i] == nil || errors.Is(out[i], ErrLockLost)) {
			s.receivers.Settled(l.Queue, l.Seq, l.Token)
		}
	}
	endSettle(span, err)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Abandon gives a delivered message back: it becomes claimable again after
// delay (at once for 0), at most MaxDelay (ErrInvalidArgument past it,
// and the message stays locked). On the queue's last allowed delivery it is
// dead-lettered instead. Fenced and replayable like Complete; a retry with
// another delay is not the same request and gets ErrLockLost.
func (s *Store) Abandon(ctx context.Context, l Lock, delay time.Duration) error {
	if delay < 0 || delay > MaxDelay {
		return invalidf(ErrInvalidArgument, "delay %v, want 0 to %v", delay, MaxDelay)
	}
	return s.settle(ctx, driver.Settlement{Op: driver.OpAbandon, DelayMS: delay.Milliseconds()}, l)
}

// Release gives back a delivery its holder never started: the message is
// ready again at once and the delivery does not count toward
// MaxDeliveryCount (its DeliveryCount goes back to what it was before the
// claim), so it is never dead-lettered by it; its place in the queue and
// in its group is kept, as with Abandon. Fenced like Abandon: the current
// token and a lease still running, ErrLockLost otherwise. Retrying the
// same Release after it succeeded (the reply was lost) succeeds again
// while its receipt lives, like Complete. Only a delivery no code has
// seen may be released: a handler that started and failed abandons.
func (s *Store) Release(ctx context.Context, l Lock) error {
	return s.settle(ctx, driver.Settlement{Op: driver.OpRelease}, l)
}

// MaxLastErrorLen bounds the reason of AbandonWithReason, in bytes.
const MaxLastErrorLen = 1024

// AbandonWithReason is Abandon that also keeps why the delivery came back
// with the message (Message.LastError; "" keeps the last one): UTF-8 of at
// most MaxLastErrorLen bytes, refused with ErrInvalidArgument otherwise
// (nothing is changed). The reason is part of the request: a retry replays
// only with the same delay and reason.
func (s *Store) AbandonWithReason(ctx context.Context, l Lock, delay time.Duration, reason string) error {
	if delay < 0 || delay > MaxDelay {
		return invalidf(ErrInvalidArgument, "delay %v, want 0 to %v", delay, MaxDelay)
	}
	if len(reason) > MaxLastErrorLen || !utf8.ValidString(reason) {
		return invalidf(ErrInvalidArgument, "abandon reason must be UTF-8 of at most %d bytes (%d given)", MaxLastErrorLen, len(reason))
	}
	return s.settle(ctx, driver.Settlement{Op: driver.OpAbandon, DelayMS: delay.Milliseconds(), LastError: reason}, l)
}

// Limits on the text Reject keeps with a dead letter.
const (
	MaxReasonLen      = 1024     // bytes of a dead-letter reason
	MaxDescriptionLen = 16 << 10 // bytes of a dead-letter description
)

// Reject dead-letters a delivered message with a reason and a description,
// both kept for PeekDeadLetters: UTF-8, at most MaxReasonLen and
// MaxDescriptionLen bytes (ErrInvalidArgument otherwise). Fenced and
// replayable like Complete.
func (s *Store) Reject(ctx context.Context, l Lock, reason, description string) error {
	if err := ValidateReject(reason, description); err != nil {
		return err
	}
	return s.settle(ctx, driver.Settlement{Op: driver.OpReject, Reason: reason, Description: description}, l)
}

// ValidateReject checks the reason and description of a Reject: UTF-8, at
// most MaxReasonLen and MaxDescriptionLen bytes, with an error matching
// ErrInvalidArgument otherwise: what Reject refuses before it writes
// anything.
func ValidateReject(reason, description string) error {
	for _, f := range []struct {
		name, value string
		max         int
	}{{"reason", reason, MaxReasonLen}, {"description", description, MaxDescriptionLen}} {
		if len(f.value) > f.max || !utf8.ValidString(f.value) {
			return invalidf(ErrInvalidArgument, "Reject's %s must be UTF-8 of at most %d bytes (%d given)", f.name, f.max, len(f.value))
		}
	}
	return nil
}

// Defer sets a delivered message aside: only ReceiveDeferred with its seq
// claims it again. Fenced and replayable like Complete.
func (s *Store) Defer(ctx context.Context, l Lock) error {
	return s.settle(ctx, driver.Settlement{Op: driver.OpDefer}, l)
}

// Renew extends a running lease by the queue's LockDuration from now and
// returns the new expiry. An expired lease is never revived: ErrLockLost.
func (s *Store) Renew(ctx context.Context, l Lock) (time.Time, error) {
	res, err := s.RenewBatch(ctx, []Lock{l})
	if err != nil {
		return time.Time{}, err
	}
	return res[0].LockedUntil, res[0].Err
}

// RenewResult is the outcome of one lock of RenewBatch.
type RenewResult struct {
	LockedUntil time.Time
	Err         error // ErrLockLost for a lease that was not running
}

// RenewBatch renews several leases in one transaction (on PostgreSQL, one
// statement each, each committed on its own: a call that fails may have
// renewed the leases before the failure). Each lock gets its own result;
// err is for failures of the whole call.
func (s *Store) RenewBatch(ctx context.Context, locks []Lock) ([]RenewResult, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	for _, l := range locks {
		if err := validateLock(l); err != nil {
			return nil, err
		}
	}
	out := make([]RenewResult, len(locks))
	err := s.alone(ctx, func(ctx context.Context, db driver.DBTX) error {
		now := s.now()
		for i, l := range locks {
			until, err := s.eng.Renew(ctx, db, driver.RenewRequest{Queue: l.Queue, Seq: l.Seq, Token: l.Token, Now: now})
			if err != nil && !errors.Is(err, ErrLockLost) {
				return err
			}
			out[i] = RenewResult{LockedUntil: fromMillis(until), Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, l := range locks {
		if out[i].Err != nil {
			s.receivers.Settled(l.Queue, l.Seq, l.Token)
		} else {
			s.receivers.Renewed(l.Queue, l.Seq, l.Token, millis(out[i].LockedUntil))
		}
	}
	return out, nil
}

// ReceiveDeferred locks the deferred message seq of queue, as Receive would
// (a new token, a lease, one more delivery). A message that is not deferred
// is ErrMessageNotFound. A message deferred on its last allowed delivery is
// dead-lettered (reason "max delivery count exceeded") and reported as
// ErrMessageNotFound: handing it out again would exceed MaxDeliveryCount.
// Asking by sequence number bypasses the order of the message's group: the
// message was already handed out in order once, before it was deferred.
func (s *Store) ReceiveDeferred(ctx context.Context, queue string, seq int64) (Message, error) {
	if err := s.ready(ctx); err != nil {
		return Message{}, err
	}
	if err := validateQueueName(queue); err != nil {
		return Message{}, err
	}
	var c driver.Row
	spent := false
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		q, err := s.queues.get(ctx, tx, queue)
		if err != nil {
			return err
		}
		c, err = s.eng.ClaimDeferred(ctx, tx, q, seq, s.now())
		if err == nil {
			s.redelivered(queue, []driver.Row{c})
		}
		if errors.Is(err, driver.ErrSpentDeferred) {
			spent = true // commit the dead-lettering, then report
			return nil
		}
		return err
	})
	if err != nil {
		return Message{}, err
	}
	if spent {
		return Message{}, fmt.Errorf("%w: %d on %q: %v", ErrMessageNotFound, seq, queue, driver.ErrSpentDeferred)
	}
	m := toMessage(queue, c)
	s.receivers.Received(receivers.ID[ReceiverTag]{Queue: queue, Tag: receiverOf(ctx)}, m)
	return m, nil
}

// CompleteAndReceive completes locks, all of queue, and claims up to
// opts.Max messages of queue, in one transaction (one commit): a consumer
// that handles one message at a time acknowledges the last and takes the
// next in one call. Each lock gets its own result, nil or ErrLockLost,
// exactly as CompleteBatch gives it, and the claim is Receive's with the
// same options (AttemptID replays it; the completions replay from their
// receipts). When nothing is claimable and opts.Wait is positive, the
// completions commit first and the call then waits as Receive does. A lock
// of another queue is ErrInvalidArgument and nothing is done.
func (s *Store) CompleteAndReceive(ctx context.Context, queue string, locks []Lock, opts ReceiveOptions) ([]error, []Message, error) {
	if err := s.ready(ctx); err != nil {
		return nil, nil, err
	}
	if err := validateReceive(queue, &opts); err != nil {
		return nil, nil, err
	}
	if len(locks) > MaxReceiveBatch {
		return nil, nil, invalidf(ErrInvalidArgument, "%d locks, at most %d", len(locks), MaxReceiveBatch)
	}
	sets := make([]driver.Settlement, len(locks))
	for i, l := range locks {
		if err := validateLock(l); err != nil {
			return nil, nil, err
		}
		if l.Queue != queue {
			return nil, nil, invalidf(ErrInvalidArgument, "a lock of queue %q in a call on %q", l.Queue, queue)
		}
		sets[i] = driver.Settlement{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
	}
	results := make([]error, len(locks))
	var claimed []driver.Row
	var span trace.Span
	if len(locks) > 0 {
		span = s.startSettle(ctx, string(driver.OpComplete), queue, len(locks))
	}
	start := time.Now()
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		q, err := s.queues.get(ctx, tx, queue)
		if err != nil {
			return err
		}
		now := s.now()
		if len(sets) > 0 {
			s.tally.Tag(tally.Complete)
			if results, err = s.eng.CompleteMany(ctx, tx, sets, now); err != nil {
				return err
			}
		}
		if q.PausedAt != 0 {
			return nil // paused: the completions commit, nothing is claimed
		}
		s.tally.Tag(tally.Receive)
		claimed, err = s.eng.Claim(ctx, tx, driver.ClaimRequest{
			Queue: q, Max: opts.Max, Delete: opts.Mode == ReceiveAndDelete,
			AttemptID: opts.AttemptID, MaxBytes: opts.MaxBytes, Now: now, Bounds: s.bounds,
		})
		s.redelivered(queue, claimed)
		return err
	})
	for i, l := range locks {
		s.tally.Observe(queue, tally.Settle, start)
		if err == nil && (results[i] == nil || errors.Is(results[i], ErrLockLost)) {
			s.receivers.Settled(l.Queue, l.Seq, l.Token)
		}
	}
	s.tally.Observe(queue, tally.Claim, start)
	endSettle(span, err)
	if err != nil {
		return nil, nil, err
	}
	if len(claimed) == 0 && opts.Wait > 0 {
		msgs, err := s.Receive(ctx, queue, opts)
		return results, msgs, err
	}
	return results, s.messagesOfClaim(ctx, queue, start, claimed), nil
}

// startSettle starts the span of a settlement named op ("complete",
// "abandon", ...) of n locks of queue, as a child of ctx's span, linked to
// the spans ctx names (tracing.WithLinks); it returns a nil span when
// tracing is off.
func (s *Store) startSettle(ctx context.Context, op, queue string, n int) trace.Span {
	tr := tracing.Tracer(s.opts.TracerProvider)
	if tr == nil {
		return nil
	}
	_, span := tracing.Start(ctx, tr, trace.SpanKindClient, tracing.OpSettle, op, queue,
		trace.WithAttributes(tracing.BatchAttrs(n)...), trace.WithLinks(tracing.Links(ctx)...))
	return span
}

// endSettle ends a span of startSettle (nil: tracing was off).
func endSettle(span trace.Span, err error) {
	if span != nil {
		tracing.End(span, err)
	}
}
