package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/setting"
)

// Headers every sink sets besides the message's id, with the message's
// fields. (The webhook sends properties under PropertyHeaderPrefix; NATS and
// AMQP carry them as headers of their own names.)
const (
	HeaderQueue         = "Mqlite-Queue"
	HeaderSeq           = "Mqlite-Seq"
	HeaderDeliveryCount = "Mqlite-Delivery-Count"
	HeaderSubject       = "Mqlite-Subject"
	HeaderGroupID       = "Mqlite-Group-Id"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultConcurrency = 8
	DefaultMaxBatch    = 100
)

// ErrGroupBusy is the failure of a message whose group already has a
// message in flight through this Relay: it is given back, to go out after
// the one before it. The store hands a group's messages out one at a time,
// so a Relay meets it only when that promise was broken (a redrive).
var ErrGroupBusy = errors.New("relay: another message of the group is in flight")

// Sink delivers messages to a far side. It is the one thing a sink
// implements; Relay does the rest.
type Sink interface {
	// Send delivers msgs, a batch of up to Config.MaxBatch messages, and
	// returns one Outcome per message, in the order of msgs. A batch holds
	// at most one message of each GroupID, so Send may deliver the messages
	// of one batch concurrently. Each message must carry ID(msg) as its
	// identity on the far side. Send must return when ctx is cancelled;
	// Relay calls it from several goroutines at once (Config.Concurrency).
	Send(ctx context.Context, msgs []mqlite.Message) []Outcome
}

// Outcome is what became of one message a Sink sent. The zero value is
// "delivered".
type Outcome struct {
	// Err is why the message was not delivered; nil when it was.
	Err error
	// RetryAfter is how long the far side asked to be left alone (an HTTP
	// Retry-After); the message is retried after it instead of after
	// Config.Backoff's delay. Zero leaves the delay to the Backoff.
	RetryAfter time.Duration
	// DeadLetter marks a failure that no retry can fix (the far side
	// refused the message): the message is dead-lettered with Reason and
	// Description at once.
	DeadLetter bool
	// Reason and Description are the dead letter's, for a DeadLetter
	// outcome: Reason names the failure ("webhook: HTTP 400"), Description
	// carries the far side's answer. For a Hold, Reason names what the far
	// side lacks, in a few fixed words (HoldObserver's reason).
	Reason      string
	Description string
	// Hold marks a failure that is the far side's and not the message's:
	// nothing there takes the message (no stream, topic or queue matches
	// it). The relay keeps the message, its lease renewed and its delivery
	// count unchanged, and sends it again after Config.HoldBackoff's
	// delay, until it goes through or Run stops. See Hold.
	Hold bool
}

// Delivered is the outcome of a message the far side accepted: the relay
// completes it.
func Delivered() Outcome { return Outcome{} }

// RetryAfter is the outcome of a message that may go through later: the
// relay abandons it, to come again after after, or after Config.Backoff's
// delay when after is zero. It is consumer.RetryAfter's outcome for a sink
// (the same words for the same fate), except that a nil err still retries.
func RetryAfter(err error, after time.Duration) Outcome {
	if err == nil {
		err = errors.New("relay: retry")
	}
	return Outcome{Err: err, RetryAfter: after}
}

// DeadLetter is the outcome of a message the far side refused for good:
// the relay dead-letters it at once with reason and description, as
// consumer.DeadLetter does for a handler.
func DeadLetter(reason, description string) Outcome {
	return Outcome{Err: errors.New(reason), DeadLetter: true, Reason: reason, Description: description}
}

// Hold is the outcome of a message that the far side has no place for
// now, for a reason no retry of this message alone would cure and no dead
// letter should record: no stream, topic or queue matches it (a cluster
// being set up, a stream not created yet, a topic deleted by mistake). The
// relay logs err once, keeps the message locked (LoopBatch renews its
// lease, so it costs no delivery) and sends it again after
// Config.HoldBackoff's delay, until it is delivered or Run stops. A
// misconfigured far side thus holds the backlog back instead of pushing it
// into the dead letters. reason names what the far side lacks in a few
// fixed words ("no_stream", "no_topic", "unroutable", "no_exchange", or
// HoldTemplate for a route template that cannot render the message): it
// is a label of the holds counted by a HoldObserver, so it must not carry
// a message's data; "" is "unknown".
func Hold(reason string, err error) Outcome {
	if err == nil {
		err = errors.New("relay: far side not ready")
	}
	if reason == "" {
		reason = "unknown"
	}
	return Outcome{Err: err, Hold: true, Reason: reason}
}

// HoldObserver is a Config.Observer that is also told of every hold:
// each time a Send answered Hold for a message. metrics.RelayObserver's
// sink observers are HoldObservers. Held is called from the relay's
// goroutines, concurrently, and must return quickly. An Observer that
// wraps another must pass Held on (the relay command's dead-letter logger
// does), or the holds go uncounted.
type HoldObserver interface {
	Held(m mqlite.Message, reason string, cause error)
}

// Delivered reports whether o is the outcome of a delivered message.
func (o Outcome) Delivered() bool { return o.Err == nil && !o.DeadLetter && !o.Hold }

// handlerErr turns o into the result consumer.LoopBatch settles by.
func (o Outcome) handlerErr() error {
	switch {
	case o.DeadLetter:
		return consumer.DeadLetter(o.Reason, o.Description)
	case o.Err == nil:
		return nil
	default:
		return consumer.RetryAfter(o.Err, o.RetryAfter)
	}
}

// ID returns the stable id of m outside the store: its MessageID, or
// "<queue>:<seq>" when it has none. Every sink sends it as the message's
// identity (webhook-id, Nats-Msg-Id, AMQP message-id), so the far side can
// drop the duplicates that at-least-once delivery brings. The same message
// has the same id on every delivery.
func ID(m mqlite.Message) string {
	if m.MessageID != "" {
		return m.MessageID
	}
	return m.Queue + ":" + strconv.FormatInt(m.Seq, 10)
}

// Config configures a Relay. The zero value is ready to use.
type Config struct {
	// Concurrency is how many Sends run at once. Defaults to 8.
	Concurrency int
	// MaxBatch is the most messages one Send gets. Defaults to 100; at
	// most mqlite.MaxReceiveBatch.
	MaxBatch int
	// Backoff is the delay before a message that failed is sent again,
	// when its Outcome names no RetryAfter. Defaults to the
	// consumer.Backoff defaults (1s doubling up to 5 minutes).
	Backoff consumer.Backoff
	// DrainTimeout is how long, once Run's ctx is cancelled, Sends in
	// flight may finish before their ctx is cancelled. Defaults to 30s;
	// -1 cancels them at once.
	DrainTimeout time.Duration
	// Logger receives the relay's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer receives each message's fate (Completed: delivered;
	// Abandoned: to be retried; Rejected: dead-lettered), for metrics and
	// logs. Defaults to none.
	Observer consumer.Observer
	// HoldBackoff spaces the attempts at messages the sink answered with
	// Hold (the far side has no stream, topic or queue for them). Defaults
	// to DefaultHoldBackoff.
	HoldBackoff consumer.Backoff
	// Gate, when set, is waited on before every Send: the relay sends a
	// batch only once Gate.Wait returned for it. The replicate module's
	// Replicator is one, so that nothing leaves the machine before it is
	// replicated. Defaults to none.
	Gate Gate
}

// DefaultHoldBackoff is Config.HoldBackoff's default: 1s doubling up to
// 30s, so that a far side fixed by hand is noticed within half a minute.
var DefaultHoldBackoff = consumer.Backoff{Initial: time.Second, Max: 30 * time.Second}

// Gate holds the messages of a relay back until they may leave the
// machine. It is an optional part of a Relay (Config.Gate), kept to one
// method so that the root module needs to know nothing of what it waits
// for: the replicate module's Replicator waits until the commits of the
// messages are replicated, so that a failover to the replica can never
// leave the far side holding an event whose business rows were lost.
type Gate interface {
	// Wait blocks until every message of msgs may be sent, or until ctx
	// ends, and then returns ctx's error. It is called from several
	// goroutines at once (Config.Concurrency), with messages the relay
	// holds the leases of; errors other than ctx's retry the batch.
	Wait(ctx context.Context, msgs []mqlite.Message) error
}

// Relay forwards the messages of one queue to a Sink, at least once: a
// message is completed only after the Sink reported it delivered, and a
// message that failed comes again until it is delivered or dead-lettered
// (the queue's MaxDeliveryCount, or a DeadLetter outcome). Messages of one
// GroupID go out strictly in order, one at a time; messages of different
// groups go out in parallel.
//
// A Relay is safe for concurrent use; Run may be called more than once,
// also at the same time.
type Relay struct {
	src   consumer.Store
	queue string
	sink  Sink
	opts  consumer.BatchConfig

	gate        Gate
	holdBackoff consumer.Backoff
	log         *slog.Logger
	holds       HoldObserver // nil unless Config.Observer is one
	holding     atomic.Bool  // a Send is holding messages the far side has no place for
	recoveries  atomic.Int64 // how many times the far side took messages again after a hold
	unrendered  atomic.Bool  // a template hold was logged

	mu     sync.Mutex
	groups map[string]struct{} // groups with a message in a Send
}

// New returns a Relay that forwards queue of src to sink. It validates its
// arguments (errors match mqlite.ErrInvalidArgument) and does not touch src.
func New(src consumer.Store, queue string, sink Sink, opts Config) (*Relay, error) {
	switch {
	case src == nil:
		return nil, invalid("nil store")
	case sink == nil:
		return nil, invalid("nil Sink")
	case queue == "":
		return nil, invalid("empty queue name")
	}
	var err error
	if opts.Concurrency, err = setting.Default("Concurrency", opts.Concurrency, DefaultConcurrency); err != nil || opts.Concurrency > mqlite.MaxReceiveBatch {
		return nil, invalid("Concurrency %d, want 1 to %d", opts.Concurrency, mqlite.MaxReceiveBatch)
	}
	if opts.MaxBatch, err = setting.Default("MaxBatch", opts.MaxBatch, DefaultMaxBatch); err != nil || opts.MaxBatch > mqlite.MaxReceiveBatch {
		return nil, invalid("MaxBatch %d, want 1 to %d", opts.MaxBatch, mqlite.MaxReceiveBatch)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HoldBackoff == (consumer.Backoff{}) {
		opts.HoldBackoff = DefaultHoldBackoff
	}
	log := opts.Logger.With("relay", queue)
	holds, _ := opts.Observer.(HoldObserver)
	return &Relay{
		src: src, queue: queue, sink: sink, groups: map[string]struct{}{},
		gate: opts.Gate, holdBackoff: opts.HoldBackoff, log: log, holds: holds,
		opts: consumer.BatchConfig{
			LoopConfig: consumer.LoopConfig{
				Concurrency:  opts.Concurrency,
				Backoff:      opts.Backoff,
				DrainTimeout: opts.DrainTimeout,
				Logger:       log,
				Observer:     opts.Observer,
			},
			MaxBatch: opts.MaxBatch,
		},
	}, nil
}

// Run relays until ctx is cancelled, then lets the Sends in flight finish
// (up to Config.DrainTimeout), gives back what it holds and returns nil.
// Messages held (Hold) are given back at once when ctx is cancelled: a
// hold waits for the far side, which the drain would not see fixed.
// It returns early with an error when the queue cannot be read for good
// (it does not exist: mqlite.ErrQueueNotFound; the store closed:
// mqlite.ErrClosed) or an option is invalid (mqlite.ErrInvalidArgument).
// Claiming, lease renewal, backoff and dead letters are consumer.LoopBatch's.
func (r *Relay) Run(ctx context.Context) error {
	// The handlers' ctx outlives ctx by the drain; the hold waits watch
	// ctx itself, so that a stop never waits a hold's backoff out.
	send := func(hctx context.Context, msgs []mqlite.Message) []error { return r.send(hctx, ctx.Done(), msgs) }
	if err := consumer.LoopBatch(ctx, r.src, r.queue, send, r.opts); err != nil {
		return fmt.Errorf("relay %s: %w", r.queue, err)
	}
	return nil
}

// send is the batch handler: it sends what no other Send holds a group of,
// and maps each Outcome to the error LoopBatch settles by. stop is closed
// when Run is told to stop.
func (r *Relay) send(ctx context.Context, stop <-chan struct{}, msgs []mqlite.Message) []error {
	errs := make([]error, len(msgs))
	out := make([]mqlite.Message, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	held := r.hold(msgs)
	defer r.release(held)
	sent := map[string]bool{}
	for i, m := range msgs {
		if g := m.GroupID; g != "" {
			if !held[g] || sent[g] {
				errs[i] = ErrGroupBusy
				continue
			}
			sent[g] = true
		}
		out = append(out, m)
		idx = append(idx, i)
	}
	if len(out) == 0 {
		return errs
	}
	if r.gate != nil {
		if err := r.gate.Wait(ctx, out); err != nil {
			for _, i := range idx {
				errs[i] = consumer.RetryAfter(fmt.Errorf("relay: gate: %w", err), 0)
			}
			return errs
		}
	}
	out, spans := r.startSpans(ctx, out)
	res := r.sendHolding(ctx, stop, out)
	if len(res) != len(out) {
		err := fmt.Errorf("relay: sink returned %d outcomes for %d messages", len(res), len(out))
		endSpans(spans, nil, err)
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	endSpans(spans, res, nil)
	for j, i := range idx {
		errs[i] = res[j].handlerErr()
	}
	return errs
}

// sendHolding sends msgs and sends again, after the hold backoff, those
// the sink answered with Hold, until none is held or ctx ends or stop is
// closed (then the held ones are retried the usual way). The first hold of a streak is
// logged at ERROR, later ones at DEBUG; the first delivery after it at INFO.
// A hold answered by a Send that began before that delivery is old news
// (the Sends run concurrently): it starts no new streak.
func (r *Relay) sendHolding(ctx context.Context, stop <-chan struct{}, msgs []mqlite.Message) []Outcome {
	began := r.recoveries.Load()
	res := r.sink.Send(ctx, msgs)
	if len(res) != len(msgs) {
		return res
	}
	pending := make([]int, 0, len(msgs)) // indices of msgs held
	for attempt := 1; ; attempt++ {
		pending = pending[:0]
		var cause, unrendered error // a far side's hold, a template's
		for i, o := range res {
			switch {
			case o.Hold:
				pending = append(pending, i)
				if o.Reason == HoldTemplate {
					unrendered = o.Err
				} else {
					cause = o.Err
				}
				if r.holds != nil {
					r.holds.Held(msgs[i], o.Reason, o.Err)
				}
			case o.Delivered() && r.holding.CompareAndSwap(true, false):
				r.recoveries.Add(1)
				r.log.Info("relay: the far side takes messages again")
			}
		}
		if len(pending) == 0 {
			return res
		}
		// A template is fixed by a restart with another one, not by the
		// far side: it is said once, whatever is delivered between.
		if unrendered != nil && r.unrendered.CompareAndSwap(false, true) {
			r.log.Error("relay: the route template renders no valid destination for some messages; holding them "+
				"until the relay runs with a template that does ("+heldCount+")", "err", unrendered)
		}
		switch {
		case cause == nil:
			r.log.Debug("relay: still holding", "err", unrendered, "held", len(pending))
		case r.recoveries.Load() == began && r.holding.CompareAndSwap(false, true):
			r.log.Error("relay: the far side has no place for the messages; holding them until it has ("+heldCount+")",
				"err", cause, "held", len(pending))
		default:
			r.log.Debug("relay: still holding", "err", cause, "held", len(pending))
		}
		t := time.NewTimer(r.holdBackoff.Delay(attempt))
		var ended error
		select {
		case <-t.C:
		case <-ctx.Done():
			ended = ctx.Err()
		case <-stop:
			ended = errStopping
		}
		if ended != nil {
			t.Stop()
			r.log.Info("relay: stopping; giving the held messages back", "held", len(pending))
			for _, i := range pending {
				res[i] = RetryAfter(fmt.Errorf("relay: held: %w (then %w)", res[i].Err, ended), givenBack)
			}
			return res
		}
		again := make([]mqlite.Message, len(pending))
		for j, i := range pending {
			again[j] = msgs[i]
		}
		began = r.recoveries.Load()
		out := r.sink.Send(ctx, again)
		if len(out) != len(again) {
			return out // the sink broke its promise: every message fails
		}
		for j, i := range pending {
			res[i] = out[j]
		}
	}
}

// errStopping is why held messages are given back when Run stops.
var errStopping = errors.New("relay: stopping")

// heldCount says how a hold counts deliveries, in the log line of a hold:
// the claim that brought the message counted one, the hold adds none (its
// lease is renewed), and the stop gives it back as it stands.
const heldCount = "each run of the relay that holds a message counts one delivery of it, the hold itself none; nothing is dead-lettered while it runs"

// givenBack is the retry delay of a held message given back because Run
// stops: claimable again at once, as the next Run must find it (a hold is
// not the message's failure, so no backoff applies). It is not 0, which
// would leave the delay to Config.Backoff; the store counts delays in
// whole milliseconds, so a nanosecond is none.
const givenBack = time.Nanosecond

// hold marks the groups of msgs in flight and returns those this call took
// (a group taken by another Send, or earlier in msgs, is not).
func (r *Relay) hold(msgs []mqlite.Message) map[string]bool {
	took := map[string]bool{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if m.GroupID == "" {
			continue
		}
		if _, busy := r.groups[m.GroupID]; busy {
			continue
		}
		r.groups[m.GroupID] = struct{}{}
		took[m.GroupID] = true
	}
	return took
}

func (r *Relay) release(took map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for g := range took {
		delete(r.groups, g)
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("relay: %w: %s", mqlite.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
