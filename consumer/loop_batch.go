package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/tracing"
)

// DefaultMaxBatch is the default of BatchConfig.MaxBatch.
const DefaultMaxBatch = 100

// BatchHandler processes a batch of messages and returns one error per
// message, in the order of msgs: nil completes that message, an error
// abandons it (after its RetryAfter, else LoopConfig.Backoff), a
// Permanent error (or a DeadLetter) dead-letters it. Returning a slice of
// another length, or panicking, fails every message of the batch.
//
// A batch holds at most one message of each group (the store hands out a
// group's messages one at a time), so the handler may work on the messages
// of one batch concurrently. ctx is cancelled when every message of the
// batch has lost its lease (the cause matches mqlite.ErrLockLost), and when
// Loop stops and DrainTimeout passes (the cause is ErrDrainTimeout). A
// message whose lease was lost is not settled, whatever its result.
type BatchHandler func(ctx context.Context, msgs []mqlite.Message) []error

// BatchConfig configures LoopBatch: LoopConfig, where Concurrency counts
// handler calls (batches) at once, plus the size of a batch. The zero value
// is ready to use.
type BatchConfig struct {
	LoopConfig
	// MaxBatch is the most messages one handler call gets. A call gets
	// what has been claimed and waits, up to MaxBatch; it never waits for
	// a batch to fill. Defaults to 100; at most mqlite.MaxReceiveBatch.
	MaxBatch int
}

var errBatchResults = errors.New("consumer: batch handler returned the wrong number of results")

// LoopBatch is Loop for a handler that takes messages in batches: it runs
// handler on up to opts.Concurrency batches at once, each of up to
// opts.MaxBatch messages, and settles each message by its own result, as
// Loop does. It holds up to Concurrency×MaxBatch messages in running
// batches plus opts.Prefetch claimed ones waiting (Prefetch defaults to
// MaxBatch here), and renews every held lease. Claiming, renewal, backoff,
// dead letters, panics and shutdown are Loop's; see Loop. With tracing on,
// each handler call runs in one "process <queue>" span, carried by its ctx
// and linked to every message's sender (a batch of one is its sender's
// child).
func LoopBatch(ctx context.Context, src Store, queue string, handler BatchHandler, opts BatchConfig) error {
	if src == nil {
		return invalid("nil Store")
	}
	if handler == nil {
		return invalid("nil BatchHandler")
	}
	var err error
	if opts.MaxBatch, err = setting.Default("MaxBatch", opts.MaxBatch, DefaultMaxBatch); err != nil || opts.MaxBatch > mqlite.MaxReceiveBatch {
		return invalid("MaxBatch %d, want 1 to %d", opts.MaxBatch, mqlite.MaxReceiveBatch)
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = opts.MaxBatch
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	l := &loop{src: src, queue: queue, batch: handler, maxBatch: opts.MaxBatch, o: o}
	return run(ctx, l, o.Concurrency*opts.MaxBatch+o.Prefetch)
}

// handleBatch gathers a batch that starts with first from the messages
// waiting, runs the batch handler on it and settles each message.
func (l *loop) handleBatch(first *delivery) {
	ds := l.gather(first)
	if len(ds) == 0 {
		return
	}
	msgs := make([]mqlite.Message, len(ds))
	for i, d := range ds {
		msgs[i] = d.msg
	}
	// The batch's ctx ends when Loop's drain ends, or when every message
	// of the batch has lost its lease: then nothing the handler does can
	// be settled.
	bctx, cancel := context.WithCancelCause(l.hctx)
	defer cancel(nil)
	var live atomic.Int64
	live.Store(int64(len(ds)))
	stops := make([]func() bool, len(ds))
	for i, d := range ds {
		stops[i] = context.AfterFunc(d.ctx, func() {
			if live.Add(-1) == 0 {
				cancel(context.Cause(d.ctx))
			}
		})
	}
	hctx, span := l.startBatchProcess(bctx, ds)
	start := time.Now()
	errs := l.callBatch(hctx, msgs)
	took := time.Since(start)
	for _, stop := range stops {
		stop()
	}
	if span != nil {
		tracing.End(span, batchError(errs))
	}
	for i, d := range ds {
		d.span = span // the settle spans are the batch span's children
		if handedOver, _ := l.settle(d, errs[i], took); !handedOver {
			l.slots <- struct{}{}
		}
	}
}

// gather returns first and up to maxBatch-1 more of the messages waiting,
// without waiting for more. Messages whose ctx has ended (their lease was
// lost, or the drain ended) and, once Loop is stopping, every message but
// first, are released instead.
func (l *loop) gather(first *delivery) []*delivery {
	ds := make([]*delivery, 0, l.maxBatch)
	add := func(d *delivery) {
		if d.ctx.Err() != nil {
			l.release(d)
			return
		}
		ds = append(ds, d)
	}
	add(first)
	for len(ds) < l.maxBatch {
		select {
		case d, ok := <-l.work:
			if !ok {
				return ds
			}
			if l.stopping() {
				l.release(d)
				continue
			}
			add(d)
		default:
			return ds
		}
	}
	return ds
}

// callBatch runs the batch handler. A panic, or a result of the wrong
// length, becomes the error of every message.
func (l *loop) callBatch(ctx context.Context, msgs []mqlite.Message) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			errs = fill(len(msgs), l.panicked("batch handler", r, "messages", len(msgs)))
		}
	}()
	errs = l.batch(ctx, msgs)
	if len(errs) != len(msgs) {
		err := fmt.Errorf("%w: %d for %d messages", errBatchResults, len(errs), len(msgs))
		l.log.Error("consumer: batch handler failed every message", "err", err)
		errs = fill(len(msgs), err)
	}
	return errs
}

// fill returns n copies of err.
func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
