package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/outbox"
)

// Source reads messages from a far side (a JetStream consumer, a RabbitMQ
// queue, a Kafka consumer group) for an Intake: the mirror of Sink. The
// implementations live in relay/nats, relay/amqp and relay/kafka. An
// Intake calls its methods from one goroutine, one at a time.
type Source interface {
	// Fetch waits for at least one message and returns up to max, or
	// returns ctx's error when ctx ends first. Each Inbound carries the
	// source's id of the message as its MessageID, the same on every
	// delivery of the message. An error the source answers with Gone
	// holds the intake; any other is retried after the intake's Backoff.
	Fetch(ctx context.Context, max int) ([]Inbound, error)
	// Ack acknowledges msgs, a batch Fetch returned, once it committed to
	// the queue: the source does not deliver them again. An error leaves
	// them to be delivered again, which the queue's dedup window drops.
	Ack(ctx context.Context, msgs []Inbound) error
	// Nack gives msgs, a batch Fetch returned that did not commit, back
	// to the source, to be delivered again before what came after them.
	Nack(ctx context.Context, msgs []Inbound) error
	// Redelivery is the longest the source waits, while the intake runs,
	// before it delivers again a message it delivered and that was not
	// acknowledged (a JetStream consumer's AckWait). The queue's dedup
	// window must be longer than it plus the intake's Outage.
	Redelivery() time.Duration
}

// Inbound is one message a Source delivered.
type Inbound struct {
	// Message is what the intake sends to the queue; its MessageID is the
	// source's id of the message (required).
	outbox.Message
	// Time is when the far side stored the message; zero when unknown. It
	// is the intake's lag (IntakeObserver.Taken).
	Time time.Time
	// Ref is the source's own handle of the delivery, to acknowledge it.
	Ref any
}

// ErrWindowTooShort is the error of an Intake whose queue forgets message
// ids sooner than the source can deliver a message again: a message
// committed, not yet acknowledged when the intake stopped, and delivered
// again after the window would be in the queue twice. It matches
// mqlite.ErrInvalidArgument too.
var ErrWindowTooShort = errors.New("relay: the queue's dedup window is not longer than the source's redelivery horizon")

// ErrNoMessageID is the cause of a held batch that has a message without
// an id: the intake cannot take it exactly once.
var ErrNoMessageID = errors.New("relay: a source message has no id")

// GoneError is a Source's error for a far side that has vanished (the
// stream deleted, the queue gone, no such topic). The intake holds: it
// logs the first one at ERROR, tries again after its HoldBackoff, and says
// at INFO when the source answers again.
type GoneError struct {
	// Reason names what is missing in a few fixed words ("no_stream",
	// "no_queue", "no_topic"): a metrics label.
	Reason string
	// Err is the far side's answer.
	Err error
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("relay: source gone (%s): %v", e.Reason, e.Err)
}

// Unwrap returns the far side's answer.
func (e *GoneError) Unwrap() error { return e.Err }

// Gone returns the *GoneError of a far side that has vanished.
func Gone(reason string, err error) error { return &GoneError{Reason: reason, Err: err} }

// IntakeObserver is told what an Intake takes. metrics.RelayObserver's
// Source observers are IntakeObservers. Its methods are called from the
// intake's goroutine and must return quickly.
type IntakeObserver interface {
	// Taken reports a message committed to the queue; duplicate when the
	// queue had it already (a delivery again of a message committed
	// before: the dedup window dropped it).
	Taken(queue string, m Inbound, duplicate bool)
	// Held reports a hold: the source gone (reason is GoneError's) or a
	// batch the queue refused ("refused").
	Held(queue string, reason string, cause error)
}

// DefaultIntakeOutage is IntakeConfig.Outage's default.
const DefaultIntakeOutage = time.Hour

// IntakeConfig configures an Intake. The zero value is ready to use.
type IntakeConfig struct {
	// MaxBatch is the most messages one transaction takes. Defaults to
	// 100; at most mqlite.MaxReceiveBatch.
	MaxBatch int
	// Outage is the longest the intake may be stopped (a crash, a deploy)
	// between the commit of a batch and its acknowledgement while exactly
	// once still holds: the queue's dedup window must be longer than it
	// plus Source.Redelivery. Defaults to one hour; -1 is none.
	Outage time.Duration
	// Backoff spaces the attempts after a failed Fetch or commit.
	// Defaults to the consumer.Backoff defaults.
	Backoff consumer.Backoff
	// HoldBackoff spaces the attempts while the source is gone or the
	// queue refuses a batch. Defaults to DefaultHoldBackoff.
	HoldBackoff consumer.Backoff
	// Logger receives the intake's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer is told of each message taken and each hold. Defaults to
	// none.
	Observer IntakeObserver
}

// Intake takes the messages of a Source into a queue of a Store, each once
// by its id: it sends each batch with outbox.SendBatch in one transaction,
// the source's ids as MessageIDs, and acknowledges the batch only after
// the commit. A message delivered again (the intake stopped between the
// commit and the acknowledgement) is dropped by the queue's dedup window,
// which Run checks is long enough. A batch that does not commit is given
// back to the source and never acknowledged.
//
// An Intake is not safe for concurrent use: run one Run at a time.
type Intake struct {
	st    *mqlite.Store
	queue string
	src   Source
	cfg   IntakeConfig
	log   *slog.Logger
}

// NewIntake returns an Intake of src into queue of st. It validates its
// arguments (errors match mqlite.ErrInvalidArgument) and touches neither
// st nor src.
func NewIntake(st *mqlite.Store, queue string, src Source, cfg IntakeConfig) (*Intake, error) {
	switch {
	case st == nil:
		return nil, invalid("nil Store")
	case src == nil:
		return nil, invalid("nil Source")
	case queue == "":
		return nil, invalid("empty queue name")
	}
	var err error
	if cfg.MaxBatch, err = setting.Default("MaxBatch", cfg.MaxBatch, DefaultMaxBatch); err != nil || cfg.MaxBatch > mqlite.MaxReceiveBatch {
		return nil, invalid("MaxBatch %d, want 1 to %d", cfg.MaxBatch, mqlite.MaxReceiveBatch)
	}
	if cfg.Outage, err = setting.DefaultOrOff("Outage", cfg.Outage, DefaultIntakeOutage, 0); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.HoldBackoff == (consumer.Backoff{}) {
		cfg.HoldBackoff = DefaultHoldBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Intake{st: st, queue: queue, src: src, cfg: cfg, log: cfg.Logger.With("intake", queue)}, nil
}

// CheckWindow returns an error matching ErrWindowTooShort and
// mqlite.ErrInvalidArgument unless window is longer than redelivery plus
// outage; it names the window that is enough.
func CheckWindow(queue string, window, redelivery, outage time.Duration) error {
	horizon := redelivery + outage
	if window > horizon {
		return nil
	}
	need := (horizon + time.Minute).Truncate(time.Minute)
	return fmt.Errorf("%w: %w: queue %s forgets message ids after %v, but a message committed and not acknowledged "+
		"may come again %v later (the source's redelivery %v plus an outage of %v): raise it with "+
		"mqlite queues update %s --dedup-window %v", mqlite.ErrInvalidArgument, ErrWindowTooShort,
		queue, window, horizon, redelivery, outage, queue, need)
}

// Run takes messages until ctx is cancelled, then returns nil; the batch
// in flight is finished or given back. It returns early with an error when
// the queue's dedup window is too short (ErrWindowTooShort), the source
// refuses its far side's setup (a Fetch error matching
// mqlite.ErrInvalidArgument), the queue does not exist
// (mqlite.ErrQueueNotFound) or the store closed (mqlite.ErrClosed).
func (in *Intake) Run(ctx context.Context) error {
	q, err := in.st.GetQueue(ctx, in.queue)
	if err != nil {
		return fmt.Errorf("intake %s: %w", in.queue, err)
	}
	if err := CheckWindow(in.queue, q.Options.DedupWindow, in.src.Redelivery(), in.cfg.Outage); err != nil {
		return err
	}
	var (
		failures int    // failed attempts in a row
		holding  string // the reason of the hold under way, "" when none
		single   int    // batches still to take one message at a time
	)
	for ctx.Err() == nil {
		max := in.cfg.MaxBatch
		if single > 0 {
			max = 1
		}
		msgs, err := in.src.Fetch(ctx, max)
		if err != nil && ctx.Err() == nil && errors.Is(err, mqlite.ErrInvalidArgument) {
			return fmt.Errorf("intake %s: %w", in.queue, err) // a source set up to lose messages
		}
		if err == nil {
			err = in.take(ctx, msgs)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			if holding != "" && holding != reasonRefused {
				in.log.Info("intake: the source answers again; taking messages")
			}
			if single > 0 {
				single--
			}
			if single == 0 {
				holding = ""
			}
			failures = 0
			continue
		}
		if errors.Is(err, mqlite.ErrClosed) || errors.Is(err, mqlite.ErrQueueNotFound) {
			return fmt.Errorf("intake %s: %w", in.queue, err)
		}
		failures++
		delay := in.cfg.Backoff.Delay(failures)
		if reason := holdReason(err); reason != "" {
			// A refused batch goes again one message at a time, so that
			// the messages before the bad one commit.
			if reason == reasonRefused {
				single = in.cfg.MaxBatch
			}
			if holding == "" {
				in.log.Error("intake: holding (nothing acknowledged that did not commit) until it is fixed", "reason", reason, "err", err)
			} else {
				in.log.Debug("intake: still holding", "reason", reason, "err", err)
			}
			holding = reason
			if in.cfg.Observer != nil {
				in.cfg.Observer.Held(in.queue, reason, err)
			}
			delay = in.cfg.HoldBackoff.Delay(failures)
		} else {
			in.log.Warn("intake: retrying", "err", err, "after", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// holdReason names the hold err calls for, or "" for a plain retry.
func holdReason(err error) string {
	var gone *GoneError
	switch {
	case errors.As(err, &gone):
		return gone.Reason
	case errors.Is(err, errRefused):
		return reasonRefused
	}
	return ""
}

// reasonRefused is the hold reason of a batch the queue refused.
const reasonRefused = "refused"

// errRefused marks a batch the queue refused for its content.
var errRefused = errors.New("the queue refused the batch")

// take commits msgs to the queue in one transaction and acknowledges them,
// or gives them back.
func (in *Intake) take(ctx context.Context, msgs []Inbound) error {
	if len(msgs) == 0 {
		return nil
	}
	batch := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		if m.MessageID == "" {
			return in.giveBack(ctx, msgs, fmt.Errorf("%w: %w (message %d of the batch)", errRefused, ErrNoMessageID, i))
		}
		batch[i] = m.Message
	}
	var res []outbox.Result
	err := in.st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		if res, err = outbox.SendBatch(tx.Context(), tx.SQL(), in.queue, batch); err != nil {
			return err
		}
		for i, r := range res {
			if r.Err != nil {
				return fmt.Errorf("message %d (id %q): %w", i, msgs[i].MessageID, r.Err)
			}
		}
		return nil
	})
	if err != nil {
		if refused(err) {
			err = fmt.Errorf("%w: %w", errRefused, err)
		}
		return in.giveBack(ctx, msgs, err)
	}
	if in.cfg.Observer != nil {
		for i, m := range msgs {
			in.cfg.Observer.Taken(in.queue, m, res[i].Duplicate)
		}
	}
	// Acknowledge even when ctx just ended: the batch committed.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if err := in.src.Ack(actx, msgs); err != nil {
		in.log.Warn("intake: acknowledging a committed batch failed; the source delivers it again and the dedup window drops it",
			"err", err, "messages", len(msgs))
	}
	return nil
}

// ackTimeout bounds an acknowledgement or a give-back.
const ackTimeout = 10 * time.Second

// giveBack gives msgs back to the source and returns why.
func (in *Intake) giveBack(ctx context.Context, msgs []Inbound, why error) error {
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if err := in.src.Nack(nctx, msgs); err != nil {
		return fmt.Errorf("%w (and giving the batch back failed: %w)", why, err)
	}
	return why
}

// refused reports whether err is the queue's refusal of the batch's
// content: no retry of the same messages would commit them.
func refused(err error) bool {
	for _, e := range []error{mqlite.ErrInvalidArgument, mqlite.ErrMessageTooLarge, mqlite.ErrDuplicateConflict} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
