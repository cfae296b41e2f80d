package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/outbox"
)

// Job is one attempt of a job of kind T, as its worker gets it.
type Job[T JobArgs] struct {
	// ID is the job's id: the seq of its first message (Cancel takes it).
	ID int64
	// Seq is the seq of the message that carries the job now (ID but
	// for a job that was snoozed).
	Seq int64
	// Queue and Kind are the job's.
	Queue string
	Kind  string
	// Args are the job's decoded arguments.
	Args T
	// Attempt is this attempt's number, from 1; snoozes do not count.
	Attempt int
	// MaxAttempts is the job's bound (InsertOpts.MaxAttempts, else
	// WorkerOpts.MaxAttempts); 0 when the queue's MaxDeliveryCount is
	// the only one.
	MaxAttempts int
	// EnqueuedAt is when the job's current message was sent.
	EnqueuedAt time.Time
	// MessageID is the message's MessageID: a unique job's key.
	MessageID string
	// LastError is the error of the job's previous failed attempt; empty
	// for none.
	LastError string
	// Errors is the history of the job's failed attempts on its current
	// message, oldest first, each with its error, time and worker: the
	// last mqlite.Config.AttemptHistory of them (mqlite.Message.Attempts).
	// A snooze sends a new message, which starts without one.
	Errors []mqlite.Attempt

	step consumer.TxStep
}

// CommitWith sets the database work that commits with the job's completion
// when the worker returns nil (or snoozes): LoopTx runs step in the
// transaction that completes the job, so the worker's rows are written
// exactly when the job is done; consumer.SQL(tx) gives the *sql.Tx. Do the
// slow work in Work, keep the step to a few statements. A later call
// replaces the step.
func (j *Job[T]) CommitWith(step consumer.TxStep) { j.step = step }

// Worker works the jobs of kind T. Work's nil completes the job (with its
// CommitWith step); an error retries it with backoff until its
// MaxAttempts, then dead-letters it; Snooze and JobCancel say otherwise.
// consumer.Permanent (or consumer.DeadLetter) dead-letters the job at
// once. ctx is cancelled when the job's lease is lost, when Cancel
// cancels it (the cause is ErrCancelled) and past WorkerOpts.Timeout.
type Worker[T JobArgs] interface {
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc makes a Worker of a function.
func WorkFunc[T JobArgs](f func(ctx context.Context, job *Job[T]) error) Worker[T] {
	return workFunc[T](f)
}

type workFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

func (f workFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// WorkerOpts are the per-kind options of a worker.
type WorkerOpts struct {
	// Timeout bounds each attempt: Work's ctx ends past it (a deadline
	// error, retried as any error). 0 for none.
	Timeout time.Duration
	// Backoff is the delay before attempt+1 after attempt failed; nil
	// leaves it to the Loop's consumer.LoopConfig.Backoff.
	Backoff func(attempt int) time.Duration
	// MaxAttempts bounds the attempts of the jobs of the kind inserted
	// without InsertOpts.MaxAttempts; 0 leaves them to the queue's
	// MaxDeliveryCount.
	MaxAttempts int
}

// Workers is the registry of the workers, one per kind. The zero value is
// not ready: use NewWorkers. Safe for concurrent use.
type Workers struct {
	mu    sync.RWMutex
	kinds map[string]*kindEntry
}

// kindEntry is the worker of one kind, with its type erased.
type kindEntry struct {
	opts WorkerOpts
	// work decodes msg's arguments and runs the worker: the step to
	// commit and the outcome (nil, or an error of the worker's).
	work func(ctx context.Context, msg mqlite.Message, meta meta) (consumer.TxStep, error)
}

// meta is what the job layer read of a message before its worker.
type meta struct {
	id, attempts int64
	maxAttempts  int
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{kinds: map[string]*kindEntry{}} }

// AddWorker registers worker for the kind of T (T's zero value's Kind),
// with no WorkerOpts. It panics when the kind already has a worker, or its
// name is invalid: a programming error, found at start-up.
func AddWorker[T JobArgs](w *Workers, worker Worker[T]) {
	AddWorkerWithOpts(w, worker, WorkerOpts{})
}

// AddWorkerWithOpts is AddWorker with the kind's options.
func AddWorkerWithOpts[T JobArgs](w *Workers, worker Worker[T], opts WorkerOpts) {
	var zero T
	kind := zero.Kind()
	if err := validKind(kind); err != nil {
		panic(err)
	}
	if worker == nil {
		panic(fmt.Sprintf("jobs: nil worker for kind %q", kind))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.kinds[kind]; ok {
		panic(fmt.Sprintf("jobs: kind %q already has a worker", kind))
	}
	w.kinds[kind] = &kindEntry{opts: opts, work: func(ctx context.Context, msg mqlite.Message, m meta) (consumer.TxStep, error) {
		var args T
		if err := json.Unmarshal(msg.Body, &args); err != nil {
			return nil, consumer.Permanent(fmt.Errorf("%w: kind %q: %v", ErrInvalidArgs, kind, err))
		}
		job := &Job[T]{ID: m.id, Seq: msg.Seq, Queue: msg.Queue, Kind: kind, Args: args,
			Attempt: int(m.attempts) + msg.DeliveryCount, MaxAttempts: m.maxAttempts,
			EnqueuedAt: msg.EnqueuedAt, MessageID: msg.MessageID, LastError: msg.LastError,
			Errors: msg.Attempts}
		err := callWorker(ctx, worker, job)
		return job.step, err
	}}
}

// callWorker runs worker on job, turning a panic into a
// *consumer.PanicError, so that a panic counts as a failed attempt.
func callWorker[T JobArgs](ctx context.Context, worker Worker[T], job *Job[T]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &consumer.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return worker.Work(ctx, job)
}

// Kinds returns the kinds that have a worker, sorted.
func (w *Workers) Kinds() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return slices.Sorted(maps.Keys(w.kinds))
}

// Run works the jobs of queue with consumer.LoopTx until ctx is cancelled:
// see LoopTx for claims, leases, concurrency and draining (opts is its
// configuration). src is the store (or the broker's client, which commits
// a worker's step as a batch of sends and has no SQL).
func (w *Workers) Run(ctx context.Context, src consumer.Store, queue string, opts consumer.LoopConfig) error {
	return consumer.LoopTx(ctx, src, queue, w.Handler(src), opts)
}

// Handler returns the consumer.TxHandler that Run runs, for a LoopTx of
// one's own: it dispatches each message by its kind to the kind's worker
// and turns the worker's outcome into the Loop's: nil completes the job
// with its step; a Snooze sends the job on after the delay and completes
// the message, in one transaction; JobCancel completes it without the
// step; an error past the job's MaxAttempts dead-letters it; another
// error retries it after the kind's Backoff. A message with no kind, a
// kind without a worker (ErrUnknownKind) or arguments that do not decode
// (ErrInvalidArgs) is dead-lettered on its first delivery. src gives the
// clock that snoozes are measured by.
func (w *Workers) Handler(src consumer.Store) consumer.TxHandler {
	return func(ctx context.Context, msg mqlite.Message) (consumer.TxStep, error) {
		kind := msg.Properties[PropKind]
		w.mu.RLock()
		e := w.kinds[kind]
		w.mu.RUnlock()
		if e == nil {
			if kind == "" {
				return nil, consumer.Permanent(fmt.Errorf("%w: the message has no %s property", ErrUnknownKind, PropKind))
			}
			return nil, consumer.Permanent(fmt.Errorf("%w %q: no worker is registered for it", ErrUnknownKind, kind))
		}
		m := meta{id: msg.Seq, maxAttempts: e.opts.MaxAttempts}
		if v, ok := msg.Properties[PropID]; ok {
			m.id, _ = strconv.ParseInt(v, 10, 64)
		}
		m.attempts, _ = strconv.ParseInt(msg.Properties[PropAttempts], 10, 64)
		if v, err := strconv.Atoi(msg.Properties[PropMaxAttempts]); err == nil && v > 0 {
			m.maxAttempts = v
		}
		ctx, done := running.start(ctx, src, msg.Queue, msg.Seq)
		defer done()
		if e.opts.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, e.opts.Timeout)
			defer cancel()
		}
		step, err := e.work(ctx, msg, m)
		attempt := int(m.attempts) + msg.DeliveryCount
		var snooze *snoozeError
		var cancelled *cancelError
		switch {
		case err == nil:
			return step, nil
		case errors.As(err, &snooze):
			return snoozeStep(clockOf(src).Now().Add(snooze.d), msg, m.id, attempt-1, step), nil
		case errors.As(err, &cancelled):
			return nil, nil
		case errors.Is(context.Cause(ctx), ErrCancelled), consumer.IsPermanent(err):
			return nil, err
		case m.maxAttempts > 0 && attempt >= m.maxAttempts:
			return nil, consumer.DeadLetter(fmt.Sprintf("jobs: attempt %d of %d failed", attempt, m.maxAttempts), err.Error())
		case e.opts.Backoff != nil:
			return nil, consumer.RetryAfter(err, e.opts.Backoff(attempt))
		}
		return nil, err
	}
}

func clockOf(src consumer.Store) mqlite.Clock {
	if c := src.Clock(); c != nil {
		return c
	}
	return mqlite.SystemClock{}
}

// snoozeError is Snooze's.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("jobs: snoozed for %v", e.d) }

// Snooze is what a worker returns to run its job again after d without
// counting an attempt: the job's message is completed and a copy of it
// (the same id, arguments, unique key and group) is sent for d from now,
// in one transaction, with the worker's CommitWith step if it set one. d
// is at most mqlite.MaxDelay; 0 runs the job again as soon as possible.
func Snooze(d time.Duration) error { return &snoozeError{d: max(d, 0)} }

// cancelError is JobCancel's.
type cancelError struct{ err error }

func (e *cancelError) Error() string { return fmt.Sprintf("jobs: job cancelled: %v", e.err) }
func (e *cancelError) Unwrap() error { return e.err }

// JobCancel is what a worker returns to cancel its own job for good: the
// job is finished (its message completed, not dead-lettered) and its
// CommitWith step is dropped. err says why; it is not kept.
func JobCancel(err error) error { return &cancelError{err: err} }

// snoozeStep is the step of a snoozed job: the worker's step, then a copy
// of msg due at at that carries the job's id and the attempts it spent,
// under msg's MessageID (its dedup row moved to the copy).
func snoozeStep(at time.Time, msg mqlite.Message, id int64, spent int, step consumer.TxStep) consumer.TxStep {
	return func(ctx context.Context, tx consumer.Tx) error {
		if step != nil {
			if err := step(ctx, tx); err != nil {
				return err
			}
		}
		props := maps.Clone(msg.Properties)
		props[PropID] = strconv.FormatInt(id, 10)
		props[PropAttempts] = strconv.Itoa(spent)
		delete(props, "traceparent")
		delete(props, "tracestate")
		next := outbox.Message{Body: msg.Body, MessageID: msg.MessageID,
			GroupID: msg.GroupID, Subject: msg.Subject, Properties: props, DeliverAt: at, Priority: msg.Priority}
		if msg.MessageID != "" {
			if c, ok := tx.(Carrier); ok { // over the broker: the commit moves the key
				return c.SendCarried(ctx, msg.Queue, msg.Seq, next)
			}
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return fmt.Errorf("jobs: snoozing a unique job: %w", err)
			}
			if err := driver.Of(sqlTx).ForgetDedup(ctx, sqlTx, msg.Queue, msg.MessageID, msg.Seq); err != nil {
				return err
			}
		}
		return tx.Send(ctx, msg.Queue, next)
	}
}

// Carrier is a consumer.Tx without SQL that can send a message under the
// MessageID of a delivery it completes, the MessageID's dedup entry moved
// from that delivery to the new message in the same transaction: the
// broker client's *client.Batch. A unique job snoozed over the broker
// keeps its key this way.
type Carrier interface {
	// SendCarried stages msg for queue, taking over the dedup entry of
	// msg.MessageID from the message fromSeq of queue, a delivery the
	// transaction completes.
	SendCarried(ctx context.Context, queue string, fromSeq int64, msg outbox.Message) error
}

// running is the registry of the jobs running in this process, so that
// Cancel cancels their ctx at once (elsewhere a cancelled job's ctx ends
// at its next renewal, which finds its lease gone).
var running = runningJobs{m: map[runKey]context.CancelCauseFunc{}}

type runKey struct {
	src   any // the Store the job runs on: a job of another store is another
	queue string
	seq   int64
}

type runningJobs struct {
	mu sync.Mutex
	m  map[runKey]context.CancelCauseFunc
}

// start registers a job that starts running; done unregisters it.
func (r *runningJobs) start(ctx context.Context, src consumer.Store, queue string, seq int64) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if !reflect.TypeOf(src).Comparable() { // no key: Cancel reaches it at its next renewal
		return ctx, func() { cancel(context.Canceled) }
	}
	k := runKey{src: src, queue: queue, seq: seq}
	r.mu.Lock()
	r.m[k] = cancel
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.m, k)
		r.mu.Unlock()
		cancel(context.Canceled)
	}
}

// cancel cancels the job's ctx if it runs here.
func (r *runningJobs) cancel(src any, queue string, seq int64) {
	r.mu.Lock()
	c := r.m[runKey{src: src, queue: queue, seq: seq}]
	r.mu.Unlock()
	if c != nil {
		c(ErrCancelled)
	}
}

// CancelStore is what Cancel needs of a store: *mqlite.Store and the
// broker's *client.Client have it.
type CancelStore interface {
	// Find reads a page of a queue's messages; see mqlite.Store.Find.
	Find(ctx context.Context, queue string, opts mqlite.FindParams) (mqlite.FindResult, error)
	// Purge removes messages of one state; see mqlite.Store.Purge.
	Purge(ctx context.Context, queue string, opts mqlite.PurgeOptions) (int, error)
}

// Cancel cancels the job id of queue: a waiting job (scheduled, retrying,
// snoozed) is removed; a running one is removed from under its worker,
// whose ctx is cancelled (at once in this process, the cause
// ErrCancelled; in another, or on a Store Run could not key, at its next
// lease renewal, the cause mqlite.ErrLockLost) and whose completion is refused
// (mqlite.ErrLockLost: its step's rows roll back). A cancelled job is
// finished, not dead: it is not dead-lettered, and frees its unique key.
// A job that is not waiting or running is ErrJobNotFound. st is the store
// or the broker's client (a key that may purge the queue).
func Cancel(ctx context.Context, st CancelStore, queue string, id int64) error {
	for range 3 { // a job that moves between states while we look gets another pass
		seq, err := current(ctx, st, queue, id)
		if err != nil {
			return err
		}
		for _, state := range []mqlite.State{mqlite.StateActive, mqlite.StateScheduled, mqlite.StateDeferred, mqlite.StateLocked} {
			n, err := st.Purge(ctx, queue, mqlite.PurgeOptions{State: state, Seqs: []int64{seq}})
			if err != nil {
				return err
			}
			if n > 0 {
				running.cancel(st, queue, seq)
				return nil
			}
		}
	}
	return fmt.Errorf("%w: job %d of queue %q kept changing state", ErrJobNotFound, id, queue)
}

// current is the seq of the live message that carries the job id: id
// itself, or a snoozed copy (PropID), found from id on.
func current(ctx context.Context, st CancelStore, queue string, id int64) (int64, error) {
	page, err := st.Find(ctx, queue, mqlite.FindParams{FromSeq: id, Max: 1, ScanMax: 1})
	if err != nil {
		return 0, err
	}
	if len(page.Messages) == 1 && page.Messages[0].Seq == id {
		return id, nil
	}
	p := mqlite.FindParams{FromSeq: id + 1, Max: 1, PropertyKey: PropID, PropertyValue: strconv.FormatInt(id, 10)}
	for {
		page, err := st.Find(ctx, queue, p)
		if err != nil {
			return 0, err
		}
		if len(page.Messages) > 0 {
			return page.Messages[0].Seq, nil
		}
		if page.NextSeq == 0 {
			return 0, fmt.Errorf("%w: job %d of queue %q", ErrJobNotFound, id, queue)
		}
		p.FromSeq = page.NextSeq
	}
}
