package watermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// errNacked is the handler outcome of a Nack: consumer.Loop abandons the
// message for a redelivery after SubscriberConfig.NackBackoff.
var errNacked = errors.New("mqlite/watermill: message nacked")

// SubscriberConfig configures NewSubscriber. The zero value is ready to use.
type SubscriberConfig struct {
	// Concurrency is how many messages of one subscription are handed out
	// and waiting for their Ack or Nack at once. Defaults to 1: the next
	// message comes after the previous one is acked or nacked, as
	// Watermill's Subscriber contract says. At most mqlite.MaxReceiveBatch.
	Concurrency int
	// Prefetch is how many more messages a subscription claims ahead, so
	// that the next one is at hand; their leases are renewed while they
	// wait, and Close gives them back. Defaults to Concurrency; -1 for none.
	Prefetch int
	// NackBackoff is how long a nacked message stays away before it is
	// claimable again, keyed on its delivery count (see consumer.Backoff).
	// Defaults to no delay at all, so the zero value is not
	// consumer.Backoff's default: to get that, set Initial to
	// consumer.DefaultBackoffInitial. Each Nack spends one delivery of the
	// queue's MaxDeliveryCount; the last one dead-letters the message.
	NackBackoff consumer.Backoff
	// AutoCreateQueues makes Subscribe create a missing queue, with
	// QueueOptions, as SubscribeInitialize does. It needs a Store that is a
	// QueueCreator. Defaults to false: Subscribe to a missing queue fails
	// with an error matching mqlite.ErrQueueNotFound.
	AutoCreateQueues bool
	// QueueOptions are the options of the queues that SubscribeInitialize
	// and AutoCreateQueues create. Defaults to mqlite's queue defaults.
	// DedupByBody changes nothing for Watermill's publishers: every message
	// carries its UUID as its MessageID.
	QueueOptions mqlite.QueueOptions
	// ConsumerGroup makes every Subscribe read one subscription of an mqlite
	// topic (Store.CreateTopic) instead of a queue: Subscribe(ctx, "orders")
	// with ConsumerGroup "billing" receives from the queue
	// "orders:billing", the group's subscription of the topic "orders". A
	// message published to the topic is then copied once into each group's
	// subscription, and the subscribers of one group compete for their
	// copy. SubscribeInitialize and AutoCreateQueues create the topic and
	// the group's subscription (with QueueOptions); they need a Store that
	// is a TopicCreator. A group gets what is published after its
	// subscription exists, not before. Defaults to "": the topic is a queue
	// and every subscriber competes for each message.
	ConsumerGroup string
	// Logger receives the diagnostics of the subscriptions' consumer.Loop.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Subscriber is a Watermill message.Subscriber over an mqlite queue: a topic
// is a queue, and each message goes to one subscription (competing
// consumers). Each Subscribe runs consumer.Loop with peek-lock delivery: a
// message is locked while it is handed out, its lease renewed until Ack
// (which completes it) or Nack (which abandons it for a redelivery). A
// Subscriber is safe for concurrent use.
type Subscriber struct {
	src  consumer.Store
	cfg  SubscriberConfig
	loop consumer.LoopConfig

	ctx    context.Context // cancelled by Close; parent of every subscription's stop
	cancel context.CancelFunc

	mu     sync.Mutex // guards closed and subs.Add against Close
	closed bool
	subs   sync.WaitGroup // one per running subscription
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber over src (an *mqlite.Store, or any
// consumer.Store). Closing the Subscriber does not close src: close the
// Subscriber first, so that it gives back what it holds while src is still
// open (a message held when the Store closes stays locked until its lease
// ends or the file is opened again). Bad options are errors matching
// mqlite.ErrInvalidArgument.
func NewSubscriber(src consumer.Store, cfg SubscriberConfig) (*Subscriber, error) {
	if src == nil {
		return nil, invalid("nil Store")
	}
	if cfg.AutoCreateQueues {
		if _, ok := src.(QueueCreator); !ok {
			return nil, invalid("AutoCreateQueues with a Store that cannot create queues")
		}
		if _, ok := src.(TopicCreator); !ok && cfg.ConsumerGroup != "" {
			return nil, invalid("AutoCreateQueues with a ConsumerGroup and a Store that cannot create topics")
		}
	}
	backoff := cfg.NackBackoff
	if backoff == (consumer.Backoff{}) {
		backoff.Initial = -1 // no delay
	}
	lo := consumer.LoopConfig{
		Concurrency: cfg.Concurrency,
		Prefetch:    cfg.Prefetch,
		Backoff:     backoff,
		// Close gives back at once what is handed out and not yet acked:
		// Loop cancels the waiting handlers, which abandon with no delay.
		DrainTimeout: -1,
		Logger:       cfg.Logger,
	}
	if err := validate(src, lo); err != nil {
		return nil, err
	}
	s := &Subscriber{src: src, cfg: cfg, loop: lo}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// validate runs consumer.Loop's own validation of lo, on a ctx that is
// already cancelled so that the Loop returns at once having claimed nothing
// (a call on a done ctx changes nothing): NewSubscriber refuses what every
// Subscribe would, with Loop's words, and keeps no second copy of its rules.
func validate(src consumer.Store, lo consumer.LoopConfig) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	nop := func(context.Context, mqlite.Message) error { return nil }
	if err := consumer.Loop(ctx, src, "validate", nop, lo); err != nil {
		return fmt.Errorf("mqlite/watermill: %w", err)
	}
	return nil
}

// Subscribe starts a subscription to the queue named topic and returns its
// messages. Each message must be acked (the message is completed: it is
// gone) or nacked (it is abandoned and comes again after NackBackoff, to this
// or another subscription). Its context carries the values of ctx and is
// cancelled once the message is settled, when the lease on it is lost (then
// it will be delivered again, so an Ack no longer helps), and when the
// subscription stops.
//
// The subscription stops, and the channel is closed, when ctx is cancelled
// or the Subscriber is closed: messages claimed but not yet acked are given
// back at once. It also stops when the queue is deleted or the Store
// closes. A missing queue is an error matching mqlite.ErrQueueNotFound unless
// AutoCreateQueues is set; after Close, Subscribe returns
// ErrSubscriberClosed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, ErrSubscriberClosed
	}
	queue := s.queueOf(topic)
	if s.cfg.AutoCreateQueues {
		if err := s.initialize(ctx, topic); err != nil {
			return nil, fmt.Errorf("mqlite/watermill: subscribe to %s: %w", topic, err)
		}
	} else if _, err := s.src.Peek(ctx, queue, mqlite.PeekParams{Max: 1}); err != nil {
		// Loop would find a missing queue too, but only after Subscribe
		// returned: tell the caller now.
		return nil, fmt.Errorf("mqlite/watermill: subscribe to %s: %w", topic, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	lctx, stop := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.ctx, stop)
	out := make(chan *message.Message)
	handler := func(hctx context.Context, m mqlite.Message) error {
		return deliver(hctx, out, m)
	}
	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		defer close(out) // after Loop returned: no handler sends any more
		defer unhook()
		defer stop()
		err := consumer.Loop(lctx, s.src, queue, handler, s.loop)
		if err != nil {
			s.logger().Error("mqlite/watermill: subscription stopped", "topic", topic, "queue", queue, "err", err)
		}
	}()
	return out, nil
}

// deliver is the consumer.Handler of a subscription: it hands m out on out
// and waits for its Ack (nil: Loop completes it) or Nack (an error: Loop
// abandons it). hctx is cancelled by Loop when the lease is lost or the
// subscription stops.
func deliver(hctx context.Context, out chan<- *message.Message, m mqlite.Message) error {
	wm := fromMqlite(m)
	mctx, cancel := context.WithCancel(hctx)
	defer cancel() // the message's context ends with its delivery
	wm.SetContext(mctx)
	select {
	case out <- wm:
	case <-hctx.Done():
		// The lease was lost, or the subscription is stopping: Loop
		// cancels hctx as soon as it stops (DrainTimeout -1) and then
		// abandons the message with no delay.
		return context.Cause(hctx)
	}
	select {
	case <-wm.Acked():
		return nil
	case <-wm.Nacked():
		return errNacked
	case <-hctx.Done():
		// An Ack that raced the stop still wins.
		select {
		case <-wm.Acked():
			return nil
		default:
			return context.Cause(hctx)
		}
	}
}

// SubscribeInitialize creates the queue named topic with
// SubscriberConfig.QueueOptions, unless it exists. The Store must be a
// QueueCreator (*mqlite.Store is one). With a ConsumerGroup it creates the
// mqlite topic and the group's subscription instead, unless they exist; the
// Store must then be a TopicCreator (*mqlite.Store and *client.Client are).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if _, ok := s.src.(QueueCreator); !ok {
		return invalid("SubscribeInitialize with a Store that cannot create queues")
	}
	if _, ok := s.src.(TopicCreator); !ok && s.cfg.ConsumerGroup != "" {
		return invalid("SubscribeInitialize with a ConsumerGroup and a Store that cannot create topics")
	}
	if err := s.initialize(context.Background(), topic); err != nil {
		return fmt.Errorf("mqlite/watermill: subscribe initialize: %w", err)
	}
	return nil
}

// queueOf is the mqlite queue that Subscribe(topic) reads: the queue named
// topic, or the ConsumerGroup's subscription of the topic.
func (s *Subscriber) queueOf(topic string) string {
	if s.cfg.ConsumerGroup == "" {
		return topic
	}
	return topic + ":" + s.cfg.ConsumerGroup
}

// initialize creates what Subscribe(topic) reads unless it exists: the
// queue, or the topic and the group's subscription. NewSubscriber and
// SubscribeInitialize checked that the Store can.
func (s *Subscriber) initialize(ctx context.Context, topic string) error {
	if s.cfg.ConsumerGroup == "" {
		return createQueue(ctx, s.src.(QueueCreator), topic, s.cfg.QueueOptions)
	}
	return createSubscription(ctx, s.src.(TopicCreator), topic, s.queueOf(topic), s.cfg.QueueOptions)
}

// Close stops every subscription, gives back the messages they hold and not
// yet acked (abandoned with no delay, so they are claimable at once), closes
// their channels and waits for all of their goroutines. An Ack that comes
// after Close has no effect: the message is delivered again. Close does not
// close the Store. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.subs.Wait()
	return nil
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Subscriber) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}
