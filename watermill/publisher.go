package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// PublisherConfig configures NewPublisher and NewTxPublisher. The zero value
// is ready to use.
type PublisherConfig struct {
	// GroupIDFunc gives a message's GroupID: messages of one group are
	// delivered one at a time, in the order they were published. It must be
	// safe for concurrent use. Defaults to none: no message has a group, and
	// the queue hands them out in any order to its consumers.
	GroupIDFunc GroupIDFunc
	// AutoCreateQueues creates a topic's queue, with QueueOptions, when a
	// publish finds it missing. Only NewPublisher can: NewTxPublisher
	// refuses it (see NewTxPublisher). Defaults to false: publishing to a
	// missing queue fails with an error matching mqlite.ErrQueueNotFound.
	AutoCreateQueues bool
	// QueueOptions are the options of the queues that AutoCreateQueues
	// creates. Defaults to mqlite's queue defaults. DedupByBody changes
	// nothing here: every message carries its UUID as its MessageID.
	QueueOptions mqlite.QueueOptions
}

// GroupIDFunc maps a message published to topic to its mqlite GroupID; ""
// means no group. It is the partition key of other Pub/Subs.
type GroupIDFunc func(topic string, msg *message.Message) string

// GroupIDFromMetadata returns a GroupIDFunc that takes the GroupID from the
// message's metadata under key ("" when the key is absent).
func GroupIDFromMetadata(key string) GroupIDFunc {
	return func(_ string, msg *message.Message) string { return msg.Metadata.Get(key) }
}

// Publisher is a Watermill message.Publisher that sends each message to the
// mqlite queue named by the topic. Build it with NewPublisher (its own
// transaction per Publish) or NewTxPublisher (inside the caller's
// transaction). A Publisher is safe for concurrent use.
//
// A message becomes an mqlite message as follows: its UUID is the MessageID
// (so a republish of the same UUID inside the queue's DedupWindow is
// recognised and not delivered twice, and the same UUID with another payload
// is mqlite.ErrDuplicateConflict), its payload the Body, its metadata the
// Properties, and PublisherConfig.GroupIDFunc gives the GroupID. The message's
// Watermill context is not stored.
type Publisher struct {
	cfg  PublisherConfig
	send func(ctx context.Context, topic string, msgs []outbox.Message) error

	mu     sync.RWMutex // held for reading by each Publish, for writing by Close
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that sends over st: each Publish call is
// one transaction of st, so its messages commit together or not at all.
// Closing the Publisher does not close st.
func NewPublisher(st *mqlite.Store, cfg PublisherConfig) (*Publisher, error) {
	if st == nil {
		return nil, invalid("nil Store")
	}
	p := &Publisher{cfg: cfg}
	p.send = func(ctx context.Context, topic string, msgs []outbox.Message) error {
		err := sendInTx(ctx, st, topic, msgs)
		if errors.Is(err, mqlite.ErrQueueNotFound) && cfg.AutoCreateQueues {
			if err := createQueue(ctx, st, topic, cfg.QueueOptions); err != nil {
				return err
			}
			err = sendInTx(ctx, st, topic, msgs)
		}
		return err
	}
	return p, nil
}

// NewTxPublisher returns a Publisher that writes into tx, the caller's
// transaction on an mqlite Store's connection (Store.Tx's tx.SQL(), a *sql.Tx
// begun on Store.DB(), or a *sqlx.Tx): the messages commit or roll back with
// the caller's own rows, and a rolled-back publish is never delivered.
// It never begins, commits or rolls back tx. Build one per transaction; it
// must not be used after tx ends.
//
// Publish calls outbox.SendBatch on tx. When one message of a Publish
// conflicts (mqlite.ErrDuplicateConflict) the others are already written
// in tx: Publish returns the error and the caller decides whether to roll
// back. AutoCreateQueues is refused (mqlite.ErrInvalidArgument): creating a
// queue needs the store's one connection, which tx holds, and the caller's
// transaction is no place for queue administration; create queues up front.
func NewTxPublisher(tx outbox.Execer, cfg PublisherConfig) (*Publisher, error) {
	if tx == nil {
		return nil, invalid("nil transaction")
	}
	if cfg.AutoCreateQueues {
		return nil, invalid("AutoCreateQueues with a transaction: create the queue before the transaction")
	}
	p := &Publisher{cfg: cfg}
	p.send = func(ctx context.Context, topic string, msgs []outbox.Message) error {
		res, err := outbox.SendBatch(ctx, tx, topic, msgs)
		if err != nil {
			return err
		}
		return firstSlotError(res, msgs)
	}
	return p, nil
}

// Publish sends msgs to the queue named topic, in order. It blocks until
// they are written (NewPublisher: committed; NewTxPublisher: written in
// the caller's transaction). It runs with the context of msgs[0]: cancelling
// it before the commit rolls the Publish back. After Close it returns
// ErrPublisherClosed. Errors match the root package's sentinels:
// mqlite.ErrQueueNotFound, ErrDuplicateConflict, ErrMessageTooLarge,
// ErrInvalidMessage (a message with an empty UUID, which could not be
// de-duplicated by its id, is one).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		om, err := toOutbox(topic, m, p.cfg.GroupIDFunc)
		if err != nil {
			return fmt.Errorf("mqlite/watermill: publish to %s: %w", topic, err)
		}
		out[i] = om
	}
	if err := p.send(msgs[0].Context(), topic, out); err != nil {
		return fmt.Errorf("mqlite/watermill: publish to %s: %w", topic, err)
	}
	return nil
}

// Close marks the Publisher closed and waits for Publish calls in progress.
// It closes neither the Store nor the transaction. It is safe to call more
// than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// sendInTx sends msgs in one transaction of st; a slot that conflicts rolls
// the whole batch back.
func sendInTx(ctx context.Context, st *mqlite.Store, topic string, msgs []outbox.Message) error {
	return st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := outbox.SendBatch(tx.Context(), tx.SQL(), topic, msgs)
		if err != nil {
			return err
		}
		return firstSlotError(res, msgs)
	})
}

// firstSlotError returns the error of the first slot of res that failed.
func firstSlotError(res []outbox.Result, msgs []outbox.Message) error {
	for i, r := range res {
		if r.Err != nil {
			return fmt.Errorf("message %s: %w", msgs[i].MessageID, r.Err)
		}
	}
	return nil
}

// QueueCreator is a Store that can create queues: *mqlite.Store is one.
// A Subscriber needs it for SubscribeInitialize and AutoCreateQueues.
type QueueCreator interface {
	// CreateQueue creates the queue name; an existing one is
	// mqlite.ErrQueueExists.
	CreateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error
}

var _ QueueCreator = (*mqlite.Store)(nil)

// createQueue creates the queue name unless it exists.
func createQueue(ctx context.Context, qc QueueCreator, name string, opts mqlite.QueueOptions) error {
	if err := qc.CreateQueue(ctx, name, opts); err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		return fmt.Errorf("create queue %s: %w", name, err)
	}
	return nil
}

// TopicCreator is a Store that can create mqlite topics and their
// subscriptions: *mqlite.Store and *client.Client are. A Subscriber with a
// ConsumerGroup needs it for SubscribeInitialize and AutoCreateQueues.
type TopicCreator interface {
	// CreateTopic creates the topic name; a name in use is
	// mqlite.ErrTopicExists.
	CreateTopic(ctx context.Context, name string) error
	// GetTopic returns a topic with its subscriptions.
	GetTopic(ctx context.Context, name string) (mqlite.TopicInfo, error)
	// CreateSubscription subscribes a new queue to topic; an existing
	// queue is mqlite.ErrQueueExists.
	CreateSubscription(ctx context.Context, topic, queue string, opts mqlite.SubscriptionOptions) error
}

var _ TopicCreator = (*mqlite.Store)(nil)

// createSubscription creates topic and its subscription queue unless they
// exist. A queue of that name that is not a subscription of topic is
// mqlite.ErrQueueExists, and a queue named topic mqlite.ErrTopicNotFound:
// neither is taken over.
func createSubscription(ctx context.Context, tc TopicCreator, topic, queue string, opts mqlite.QueueOptions) error {
	if err := tc.CreateTopic(ctx, topic); err != nil && !errors.Is(err, mqlite.ErrTopicExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	err := tc.CreateSubscription(ctx, topic, queue, mqlite.SubscriptionOptions{Queue: opts})
	if err == nil {
		return nil
	}
	if !errors.Is(err, mqlite.ErrQueueExists) {
		return fmt.Errorf("subscribe %s to topic %s: %w", queue, topic, err)
	}
	info, gerr := tc.GetTopic(ctx, topic)
	if gerr != nil {
		return fmt.Errorf("subscribe %s to topic %s: %w", queue, topic, gerr)
	}
	for _, sub := range info.Subscriptions {
		if sub.Queue == queue {
			return nil
		}
	}
	return fmt.Errorf("subscribe %s to topic %s: the queue exists and is not its subscription: %w", queue, topic, err)
}
