package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
)

// Loop, LoopTx and LoopBatch are one loop over a shared core: this file
// starts it (run), runs its workers and stops it (stopClaiming, drain);
// loop_claim.go claims, prefetches and gives back what no handler started;
// loop_settle.go settles a delivery by its outcome; renew.go keeps the
// leases and complete.go completes in batches. Each mode adds its handler
// and what it alone does: loop_handler.go (Loop, and the handling of one
// message that LoopTx shares), loop_tx.go (LoopTx's commit of a step) and
// loop_batch.go (LoopBatch's gathering of a batch).

// ErrDrainTimeout is the cause of a handler's ctx cancelled because Loop was
// stopping and LoopConfig.DrainTimeout passed. The other errors of Loop are
// the root package's: a lost lease matches mqlite.ErrLockLost, bad options
// mqlite.ErrInvalidArgument.
var ErrDrainTimeout = errors.New("consumer: drain timeout passed while stopping")

// PanicError is the error of a handler that panicked: Loop recovers the
// panic, logs it with its stack and abandons the message like any error.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the handler goroutine's stack at the panic
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", e.Value) }

// panicked is the *PanicError of r, what a call of the application's code
// (what: handler, step, batch handler) panicked with, which it logs with
// its stack after attrs. The deferred function of the call recovers r
// and calls it, so that a call that does not panic pays nothing.
func (l *loop) panicked(what string, r any, attrs ...any) *PanicError {
	stack := debug.Stack()
	l.log.Error("consumer: "+what+" panicked", append(attrs, "panic", r, "stack", string(stack))...)
	return &PanicError{Value: r, Stack: stack}
}

// run runs l, set up by Loop, LoopTx or LoopBatch, holding at most held
// messages: it starts the completer, the renewer and the workers, claims
// until ctx is cancelled, a claim fails for good or a handler fails with
// a programming error (fail), then stops them in turn.
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
		l.streamed = &streamed{Store: l.src}
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
	src Store
	// set is what Loop settles through: src, or streamed while it
	// streams (then streamed is not nil).
	set      Store
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
	clock    mqlite.Clock // the Store's, for lease arithmetic
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
