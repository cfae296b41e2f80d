package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/tracing"
)

// ErrDrainTimeout is the cause of a handler's ctx cancelled because Loop was
// stopping and LoopConfig.DrainTimeout passed. The other errors of Loop are
// the root package's: a lost lease matches mqlite.ErrLockLost, bad options
// mqlite.ErrInvalidArgument.
var ErrDrainTimeout = errors.New("consumer: drain timeout passed while stopping")

// Defaults of LoopConfig's zero-valued fields.
const (
	DefaultDrainTimeout  = 30 * time.Second
	DefaultSettleTimeout = 5 * time.Second
)

// receiveWait bounds one Receive of Loop. Commits and due moments wake the
// Receive at once, so this is not a polling interval: an idle Loop issues
// one claim per receiveWait.
const receiveWait = time.Minute

// receiveRetry spaces the Receives that follow a failed one.
var receiveRetry = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.2}

// Handler processes one message. Returning nil completes the message; an
// error abandons it for a retry after LoopConfig.Backoff, or, wrapped with
// Permanent, dead-letters it. A panic is recovered and treated as an error.
//
// ctx is cancelled when the lease cannot be kept (the cause matches
// mqlite.ErrLockLost) and when Loop stops and DrainTimeout passes (the cause is
// ErrDrainTimeout); ctx carries the values of Loop's ctx and, when tracing
// is on, the message's process span (see Loop). Delivery is at-least-once:
// make handlers idempotent.
type Handler func(ctx context.Context, msg mqlite.Message) error

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

// PanicError is the error of a handler that panicked: Loop recovers the
// panic, logs it with its stack and abandons the message like any error.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the handler goroutine's stack at the panic
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", e.Value) }

// Loop runs handler over the messages of queue until ctx is cancelled.
//
// It claims messages in batches with Receive, which blocks without polling:
// a commit that makes a message claimable wakes it at once, and so does the
// moment a scheduled or abandoned message falls due or a lease expires. It
// runs the handler on up to opts.Concurrency goroutines, renews each held
// message's lease at half its remaining time, and settles each message by
// the handler's outcome: nil completes it, a Permanent error rejects it to
// the dead letters with the error's text as the reason, any other error or
// a panic abandons it for a retry after opts.Backoff.Delay(DeliveryCount).
// A delivery whose lease is lost has its handler's ctx cancelled (the cause
// matches mqlite.ErrLockLost) and is not settled by Loop.
//
// When every handler call fails (a downstream outage), Loop keeps cycling
// with backoff: each failed message is abandoned for its delay, taken
// again when it falls due, and dead-lettered once its queue's
// MaxDeliveryCount is spent. A failing handler never stops Loop from
// receiving, embedded or over the broker's stream.
//
// When ctx is cancelled Loop stops claiming and gives back the messages it
// claimed ahead but never handed to a handler: through Release when src is
// a Releaser (mqlite.Store and the broker's client are: each is ready at
// once and the delivery does not count, so even a queue with
// MaxDeliveryCount 1 keeps them), else by Abandon with no delay (each
// spends a delivery, and on its last allowed one becomes a dead letter).
// It lets running handlers finish for up to opts.DrainTimeout, then
// cancels their ctx and abandons with no delay what they still hold
// (those deliveries count). Loop gives back the same way when it stops on
// an error. It waits for every handler to return, so a handler that
// ignores its ctx delays Loop's return, and then returns nil. No goroutine
// of Loop outlives it.
//
// Loop returns early with an error for bad arguments, and when Receive
// fails for good (the store is closed, the queue does not exist), after
// the same drain. Other Receive errors are logged and retried with a
// backoff. A handler error that says the code is wrong rather than the
// moment, the same on every delivery (a programming error: ErrNoSQL,
// ErrTxEnded, mqlite.ErrInsideTx, mqlite.ErrNotAStore, mqlite.ErrNilTx,
// however wrapped), is never retried: Loop dead-letters the message at once
// with the error as its reason, logs why, stops claiming, and returns the
// error after the same drain. The completions of concurrent handlers share
// commits (Source.CompleteBatch). Loop is safe to run several times at
// once, on one queue or many.
//
// When tracing is on (Source.TracerProvider),
// each handler runs inside a "process <queue>" span of kind consumer,
// child of the context the message was sent in (its traceparent property)
// and carried by the handler's ctx; the settlement's span is its child. A
// handler error sets the span's status to Error.
func Loop(ctx context.Context, src Source, queue string, handler Handler, opts LoopConfig) error {
	if src == nil {
		return invalid("nil Source")
	}
	if handler == nil {
		return invalid("nil Handler")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return run(ctx, &loop{src: src, queue: queue, handler: handler, o: o}, o.Concurrency+o.Prefetch)
}

// run runs l, set up by Loop or LoopBatch, holding at most held messages:
// it starts the completer, the renewer and the workers, claims until ctx
// is cancelled, a claim fails for good or a handler fails with a
// programming error (fail), then stops them in turn.
func run(ctx context.Context, l *loop, held int) error {
	hctx, hcancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hcancel(nil)
	tag := l.setUp(ctx, hctx, held)
	// fail ends the claims through rctx.
	rctx, stopFetch := context.WithCancel(mqlite.WithReceiver(ctx, tag))
	defer stopFetch()
	l.stopFetch = stopFetch
	sr, streaming := l.src.(Streamer)
	// LoopTx completes through commitTx, outside a stream's window.
	if streaming && l.batch == nil && l.txHandler == nil {
		l.streamed = &streamed{Source: l.src}
		l.set = l.streamed
	}
	stopCompleter := l.startCompleter()
	renewCtx, stopRenewer := context.WithCancel(l.sctx)
	renewerDone := l.goDone(func() { l.renew(renewCtx) })
	workersDone := l.startWorkers()

	var err error
	if l.streamed != nil {
		err = l.fetchStream(rctx, sr, min(held, mqlite.MaxReceiveBatch))
	} else {
		err = l.fetch(rctx)
	}

	l.stopClaiming()
	l.drain(workersDone, hcancel)
	stopCompleter()
	stopRenewer()
	<-renewerDone
	if err == nil {
		err = l.failed // the workers are done: no fail runs past here
	}
	return err
}

// fail makes Loop stop claiming and return err, once a handler or a step
// failed with a programming error (the first such error wins).
func (l *loop) fail(err error) {
	l.failOnce.Do(func() {
		l.failed = err
		l.stopFetch()
	})
}

// setUp fills in l's state for run, hctx being the parent of handler
// contexts, and returns the tag its receives are counted under.
func (l *loop) setUp(ctx, hctx context.Context, held int) mqlite.ReceiverTag {
	l.clock = clockOf(l.src)
	l.log = l.o.Logger.With("queue", l.queue)
	l.hctx = hctx
	// The store counts this loop's receives, and the claims its
	// completions make, under the loop's own name (the broker's client
	// ignores the tag: the broker names it).
	tag := mqlite.ReceiverTag{Name: fmt.Sprintf("loop-%d", loopNames.Add(1))}
	l.sctx = mqlite.WithReceiver(context.WithoutCancel(ctx), tag)
	l.stop = make(chan struct{})
	l.slots = make(chan struct{}, held)
	l.work = make(chan *delivery, held)
	l.renewals = newRenewer()
	for range cap(l.slots) {
		l.slots <- struct{}{}
	}
	l.set = l.src
	return tag
}

// goDone runs f on a goroutine and returns a channel closed when it returns.
func (l *loop) goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// startCompleter starts the goroutine that completes the successes of
// handlers in batches, unless LoopTx completes in its transactions, and
// returns what stops it once the workers are done.
func (l *loop) startCompleter() (stop func()) {
	if l.txHandler != nil {
		return func() {}
	}
	l.completions = make(chan completion, cap(l.slots))
	done := l.goDone(func() { l.complete(l.set) })
	return func() {
		close(l.completions)
		<-done
	}
}

// startWorkers starts Concurrency workers over l.work; the channel it
// returns is closed when they all returned, after l.work is closed.
func (l *loop) startWorkers() <-chan struct{} {
	var workers sync.WaitGroup
	for range l.o.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for d := range l.work {
				switch {
				case l.stopping():
					l.release(d)
				case l.batch != nil:
					l.handleBatch(d)
				default:
					l.handle(d)
				}
			}
		}()
	}
	return l.goDone(workers.Wait)
}

// stopClaiming stops Loop claiming: it releases what was claimed but not
// started and closes l.work. Once feed was taken after stop, the
// completer delivers no more; once claimMu was, no commit of LoopTx
// claims ahead.
func (l *loop) stopClaiming() {
	l.claimMu.Lock()
	close(l.stop)
	l.claimMu.Unlock()
	l.feed.Lock()
	//lint:ignore SA2001 a barrier: no deliver is under way past it
	l.feed.Unlock()
	l.releaseWaiting()
	close(l.work)
}

// drain waits for the workers to finish, cancelling the handlers still
// running once DrainTimeout passed.
func (l *loop) drain(workersDone <-chan struct{}, hcancel context.CancelCauseFunc) {
	timer := time.NewTimer(l.o.DrainTimeout)
	defer timer.Stop()
	select {
	case <-workersDone:
	case <-timer.C:
		l.log.Warn("consumer: drain timeout passed; cancelling running handlers", "drain_timeout", l.o.DrainTimeout)
		hcancel(ErrDrainTimeout)
		<-workersDone
	}
}

// loopNames numbers the loops of the process, for their ReceiverTag.
var loopNames atomic.Int64

// loop is the state of one Loop call.
type loop struct {
	src Source
	// set is what Loop settles through: src, or streamed while it
	// streams (then streamed is not nil).
	set      Source
	streamed *streamed
	// claimOnComplete is set while fetch claims with Receive: the
	// completer then claims in its calls too.
	claimOnComplete atomic.Bool
	// claimMu is held (read) by a commit of LoopTx that claims ahead,
	// from its check of stopping until it returns, and by stopClaiming
	// (write) to close stop: a message claimed ahead was claimed before
	// Loop stopped, and its worker runs it (see completeTx).
	claimMu sync.RWMutex
	queue   string
	handler Handler
	// txHandler and commitTx are LoopTx's; txHandler is nil otherwise.
	txHandler TxHandler
	commitTx  commitFunc
	// batch and maxBatch are LoopBatch's; batch is nil for Loop.
	batch    BatchHandler
	maxBatch int
	o        LoopConfig
	clock    mqlite.Clock // the Source's, for lease arithmetic
	log      *slog.Logger

	hctx context.Context // parent of handler contexts: cancelled at the drain timeout
	sctx context.Context // parent of settlements: never cancelled

	stop      chan struct{} // closed when Loop stops claiming
	stopFetch func()        // ends fetch: Loop stops (fail)
	failOnce  sync.Once
	failed    error          // the programming error Loop returns; written once by fail
	feed      sync.Mutex     // held while deliver fills l.work
	slots     chan struct{}  // one token per message Loop may hold
	work      chan *delivery // claimed messages waiting for a handler
	renewals  *renewer
	// completions feeds the completer goroutine; nil for LoopTx.
	completions chan completion
}

// delivery is one held message.
type delivery struct {
	msg    mqlite.Message
	ctx    context.Context // the handler's, before its process span
	cancel context.CancelCauseFunc
	span   trace.Span // the process span; nil when tracing is off
	step   TxStep     // LoopTx: what the handler left to run in the transaction
	// stepErr is LoopTx's: the step's failure, which the process span
	// reports like a handler's error.
	stepErr error

	// Guarded by renewer.mu.
	until   time.Time // the lease's end as last known
	renewAt time.Time // when to renew: half the remaining lease
	lost    error     // why the lease was lost, set by the renewer
}

func (l *loop) stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

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
// Release when the Source is a Releaser (the delivery does not count),
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
		// Source's own call (a stream carries no release of a
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

// handle runs the handler on d and settles d by its outcome, then does the
// same for the message LoopTx's commit of d claimed in d's slot, if any:
// claimed before Loop stopped, it runs even if Loop is stopping now.
func (l *loop) handle(d *delivery) {
	for d != nil {
		d = l.handleOne(d)
	}
}

// handleOne runs the handler on d and settles d by its outcome; it returns
// the delivery LoopTx's commit of d claimed, which holds d's slot, or nil.
func (l *loop) handleOne(d *delivery) (next *delivery) {
	handedOver := false // to the completer, release or next, which free the slot
	defer func() {
		if !handedOver {
			l.slots <- struct{}{}
		}
	}()
	if d.ctx.Err() != nil {
		// The lease was lost while d waited (release leaves it be), or
		// Loop is stopping and its drain already ended (release gives
		// it back).
		handedOver = true
		l.release(d)
		return nil
	}
	ctx, span := l.startProcess(d)
	start := time.Now()
	err := l.call(ctx, d)
	handedOver, next = l.settle(d, err, time.Since(start))
	if span != nil && !handedOver { // the completer ends a span handed over
		tracing.End(span, cmp.Or(err, d.stepErr))
	}
	return next
}

// settle settles d by its handler's outcome err. It reports whether d's
// slot was handed over: to the completer, which then frees it, or to next,
// the message LoopTx's commit claimed (d's process span is then ended).
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
	fromTx := false // err is the step's or its commit's
	if err == nil && l.txHandler != nil {
		claimed, stepErr, serr := l.completeTx(sctx, d)
		switch {
		case serr != nil && !programmingError(serr) && !refused(serr):
			l.settleFailed(m, "complete", serr)
			return false, nil
		case serr != nil:
			d.stepErr, err = serr, serr // nothing committed: dead-lettered below
		case stepErr != nil:
			d.stepErr, err = stepErr, stepErr // settled below like a handler's error
		default:
			l.o.Observer.Completed(m, took)
			if len(claimed) == 0 {
				return false, nil
			}
			// The commit claimed the next message for d's slot.
			if d.span != nil {
				tracing.End(d.span, nil)
			}
			l.o.Observer.Received(l.queue, len(claimed))
			next = l.newDelivery(claimed[0]) // the commit claims one at most
			l.renewals.add(next, l.clock.Now())
			return true, next
		}
		fromTx = true
	}
	switch {
	case err == nil && l.completions != nil:
		l.completions <- completion{msg: m, took: took, span: d.span} // never blocks: room for every slot
		return true, nil
	case err == nil:
		if serr := l.set.Complete(sctx, m.Lock()); serr != nil {
			l.settleFailed(m, "complete", serr)
			return false, nil
		}
		l.o.Observer.Completed(m, took)
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

// call runs the handler, turning a panic into a *PanicError.
func (l *loop) call(ctx context.Context, d *delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			err = &PanicError{Value: r, Stack: stack}
			l.log.Error("consumer: handler panicked", append(msgAttrs(d.msg), "panic", r, "stack", string(stack))...)
		}
	}()
	if l.txHandler != nil {
		d.step, err = l.txHandler(ctx, d.msg)
		return err
	}
	return l.handler(ctx, d.msg)
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
