package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// Origin says where the far side keeps the message, in a few words
	// for an operator ("stream ORDERS seq 12", "queue orders delivery tag
	// 7", "topic orders partition 0 offset 41"): the log line and the
	// held record of a message held aside name it.
	Origin string
}

// ErrWindowTooShort is the error of an Intake whose queue forgets message
// ids sooner than the source can deliver a message again: a message
// committed, not yet acknowledged when the intake stopped, and delivered
// again after the window would be in the queue twice. It matches
// mqlite.ErrInvalidArgument too.
var ErrWindowTooShort = errors.New("relay: the queue's dedup window is not longer than the source's redelivery horizon")

// ErrNoMessageID is the cause of a message without an id, which the intake
// holds aside (IntakeConfig.HoldQueue): it cannot take it exactly once.
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
	// Held reports a hold of the intake, the source gone (reason is
	// GoneError's), or a message the queue refused and the intake held
	// aside in its hold queue (reason "refused", once per delivery of it:
	// the far side may deliver a refused message again before its
	// acknowledgement lands; the hold queue keeps it once).
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
	// HoldBackoff spaces the attempts while the source is gone. Defaults
	// to DefaultHoldBackoff.
	HoldBackoff consumer.Backoff
	// Logger receives the intake's diagnostics. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer is told of each message taken and each hold. Defaults to
	// none.
	Observer IntakeObserver
	// HoldQueue is the queue of the store where the intake holds aside a
	// message the queue refuses (no id, an id or a field over its limit or
	// not UTF-8, too large, its id another message's in the dedup window),
	// in the same transaction as the batch's other messages, before it
	// acknowledges them all: the rest go on, and no one who can publish on
	// the far side can stop the intake. The held record keeps the body
	// and what properties fit, and says why in its mqlite-held-*
	// properties (HeaderHeldReason and the names next to it). Defaults to the
	// queue's name followed by ".held" (a queue whose name leaves no room
	// for it needs one: NewIntake refuses it); Run creates it when missing,
	// with the queue's dedup window.
	HoldQueue string
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
	if cfg.HoldQueue == "" {
		cfg.HoldQueue = queue + ".held"
		if len(cfg.HoldQueue) > mqlite.MaxQueueNameLen {
			return nil, invalid("queue %s leaves no room for the default HoldQueue %s (at most %d bytes): give one", queue, cfg.HoldQueue, mqlite.MaxQueueNameLen)
		}
	}
	if cfg.HoldQueue == queue {
		return nil, invalid("HoldQueue is the queue %s itself", queue)
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
	err = in.st.CreateQueue(ctx, in.cfg.HoldQueue, mqlite.QueueOptions{DedupWindow: q.Options.DedupWindow})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		return fmt.Errorf("intake %s: hold queue %s: %w", in.queue, in.cfg.HoldQueue, err)
	}
	var (
		failures int    // failed attempts in a row
		holding  string // the reason of the hold under way, "" when none
		single   int    // messages still to take one at a time
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
		if errors.Is(err, errRefused) {
			// A batch refused as a whole goes again at once, one message
			// at a time: only the one refused alone is held aside.
			in.log.Debug("intake: the queue refuses the batch; taking it one message at a time", "err", err)
			single = len(msgs)
			continue
		}
		if err == nil {
			if holding != "" {
				in.log.Info("intake: the source answers again; taking messages")
				holding = ""
			}
			if single > 0 {
				single--
			}
			failures = 0
			continue
		}
		if errors.Is(err, mqlite.ErrClosed) || errors.Is(err, mqlite.ErrQueueNotFound) {
			return fmt.Errorf("intake %s: %w", in.queue, err)
		}
		failures++
		delay := in.cfg.Backoff.Delay(failures)
		var gone *GoneError
		if errors.As(err, &gone) {
			if holding == "" {
				in.log.Error("intake: holding (nothing acknowledged that did not commit) until the source answers", "reason", gone.Reason, "err", err)
			} else {
				in.log.Debug("intake: still holding", "reason", gone.Reason, "err", err)
			}
			holding = gone.Reason
			if in.cfg.Observer != nil {
				in.cfg.Observer.Held(in.queue, gone.Reason, err)
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

// reasonRefused is the hold reason of a message the queue refused.
const reasonRefused = "refused"

// errRefused marks a batch the queue refused for its content.
var errRefused = errors.New("the queue refused the batch")

// take commits msgs to the queue in one transaction, with each message the
// queue refuses held aside in the hold queue in the same transaction, and
// acknowledges them all; or gives them back. A batch the queue refuses as
// a whole (over the store's size limit) is errRefused: Run takes it again
// one message at a time, so that only the refused one is held aside.
func (in *Intake) take(ctx context.Context, msgs []Inbound) error {
	if len(msgs) == 0 {
		return nil
	}
	aside := make([]error, len(msgs)) // why each message is held aside; nil: taken
	dup := make([]bool, len(msgs))    // taken, and a duplicate the dedup window dropped
	cut := make([]bool, len(msgs))    // held aside without its body
	var (
		batch []outbox.Message
		at    []int // the index in msgs of each message of batch
	)
	for i, m := range msgs {
		switch {
		case m.MessageID == "":
			aside[i] = ErrNoMessageID
		default:
			aside[i] = m.Validate()
		}
		if aside[i] == nil {
			batch = append(batch, m.Message)
			at = append(at, i)
		}
	}
	err := in.st.Tx(ctx, func(tx *mqlite.Tx) error {
		if len(batch) > 0 {
			res, err := outbox.SendBatch(tx.Context(), tx.SQL(), in.queue, batch)
			switch {
			case err != nil && len(batch) == 1 && refused(err):
				aside[at[0]], res = err, nil
			case err != nil:
				return err
			}
			for j, r := range res {
				i := at[j]
				switch {
				case r.Err == nil:
					dup[i] = r.Duplicate
				case refused(r.Err):
					aside[i] = r.Err // its id is another message's in the window
				default:
					return fmt.Errorf("message %d (id %q): %w", i, msgs[i].MessageID, r.Err)
				}
			}
		}
		return in.holdAside(tx, msgs, aside, cut)
	})
	if err != nil {
		if len(msgs) > 1 && refused(err) && !errors.Is(err, errHoldQueue) {
			err = fmt.Errorf("%w: %w", errRefused, err)
		}
		return in.giveBack(ctx, msgs, err)
	}
	for i, m := range msgs {
		switch {
		case aside[i] != nil:
			in.log.Warn("intake: the queue refuses a message; held aside in the hold queue, acknowledged, and the rest go on",
				"hold_queue", in.cfg.HoldQueue, "origin", m.Origin, "message_id", heldID(m.MessageID), "reason", HeldReasonOf(aside[i]), "err", aside[i])
			if in.cfg.Observer != nil {
				in.cfg.Observer.Held(in.queue, reasonRefused, aside[i])
			}
		case in.cfg.Observer != nil:
			in.cfg.Observer.Taken(in.queue, m, dup[i])
		}
	}
	// Acknowledge even when ctx just ended: the batch committed.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if as, ok := in.src.(AsideSource); ok && slices.Contains(cut, true) {
		var keep, ack []Inbound
		for i, m := range msgs {
			if cut[i] {
				keep = append(keep, m)
			} else {
				ack = append(ack, m)
			}
		}
		if err := as.SetAside(actx, keep); err != nil {
			in.log.Warn("intake: setting aside at the source messages held without their bodies failed; the source delivers them again and the hold queue's window drops them",
				"err", err, "messages", len(keep))
		}
		msgs = ack
	}
	if len(msgs) == 0 {
		return nil
	}
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
