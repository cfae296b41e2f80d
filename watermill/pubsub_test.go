package watermill_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/mqlite/mqlite"
	mqwatermill "github.com/mqlite/mqlite/watermill"
)

// quiet discards the subscriptions' Loop logs (a Nack is logged at Info).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// standardFeatures are what the Pub/Sub guarantees on a Standard queue.
// Every feature that is off says why next to it (the package doc says the
// same to users).
var standardFeatures = tests.Features{
	// With SubscriberConfig.ConsumerGroup a Watermill topic is an mqlite
	// topic and each group reads its own subscription: every group gets
	// each message, the subscribers of one group compete for it.
	ConsumerGroups: true,
	// At-least-once: a lease that ends without an Ack (crash, lost
	// renewal, Close before the Ack) redelivers the message.
	ExactlyOnceDelivery: false,
	// A Standard queue orders only messages that share a GroupID; these
	// tests publish none, send to 10 concurrent subscriptions, and a Nack
	// puts a message behind those claimed ahead of it (Prefetch). The FIFO
	// run below declares ordering.
	GuaranteedOrder: false,
	// Not even with one subscription: Prefetch and Nack reorder (above).
	GuaranteedOrderWithSingleSubscriber: false,
	// Messages are rows of the SQLite file, committed before Publish
	// returns.
	Persistent: true,
	// Off: mqlite is embedded, there is no server to restart. Redelivery
	// after a crash is proven by mqlite's own SIGKILL crash tests (make
	// crash) and by recovery on Open.
	RestartServiceCommand: nil,
	// Any number of Publishers and Subscribers share one Store.
	RequireSingleInstance: false,
	// Off: an acked message is deleted; a queue is not a log.
	NewSubscriberReceivesOldMessages: false,
	// Off: a message's context is not data and is not stored.
	ContextPreserved: false,
}

// fifoFeatures are what the Pub/Sub guarantees on a FIFO queue: the
// same, plus order, since a FIFO queue hands out one message at a time in
// sequence order whatever the number of subscriptions.
var fifoFeatures = func() tests.Features {
	f := standardFeatures
	f.GuaranteedOrder = true
	f.GuaranteedOrderWithSingleSubscriber = true
	return f
}()

// suite gives each Watermill test function (each distinct *testing.T the
// constructor is called with) a Store of its own in a temporary folder, shared
// by every Publisher and Subscriber that function builds, as processes share
// a file. Each Store is closed when its test ends.
//
// When the test ends, its Subscribers are closed before its Store: some of
// Watermill's tests leave subscriptions running (TestPublishSubscribeInOrder
// closes its subscriber in a defer whose argument is evaluated at once), and
// Store.Close does not wait for a statement another goroutine is running:
// a subscription's last settlement could then write into the test's folder
// while t.TempDir removes it.
type suite struct {
	qopts mqlite.QueueOptions

	mu    sync.Mutex
	tests map[string]*suiteTest
}

// suiteTest is one test function's Store and the Subscribers built on it.
type suiteTest struct {
	st   *mqlite.Store
	subs []*mqwatermill.Subscriber
}

func newSuite(qopts mqlite.QueueOptions) *suite {
	return &suite{qopts: qopts, tests: map[string]*suiteTest{}}
}

func (s *suite) test(t *testing.T) *suiteTest {
	if st, ok := s.tests[t.Name()]; ok {
		return st
	}
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tt := &suiteTest{st: st}
	t.Cleanup(func() {
		s.mu.Lock()
		delete(s.tests, t.Name())
		s.mu.Unlock()
		for _, sub := range tt.subs {
			if err := sub.Close(); err != nil {
				t.Error(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	s.tests[t.Name()] = tt
	return tt
}

// pubSub is the suite's tests.PubSubConstructor: a topic is a queue.
func (s *suite) pubSub(t *testing.T) (message.Publisher, message.Subscriber) {
	return s.build(t, "")
}

// groupPubSub is the suite's tests.ConsumerGroupPubSubConstructor: a topic
// is an mqlite topic, the Subscriber reads group's subscription of it, and
// the Publisher sends to the topic (it creates no queue: the topic exists
// once a Subscriber initialized it).
func (s *suite) groupPubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	return s.build(t, group)
}

func (s *suite) build(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tt := s.test(t)
	pub, err := mqwatermill.NewPublisher(tt.st, mqwatermill.PublisherConfig{AutoCreateQueues: group == "", QueueOptions: s.qopts})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := mqwatermill.NewSubscriber(tt.st, mqwatermill.SubscriberConfig{
		AutoCreateQueues: true, QueueOptions: s.qopts, ConsumerGroup: group, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	tt.subs = append(tt.subs, sub)
	return pub, sub
}

// suiteQueue is the queue options of the suite's topics. MaxDeliveryCount is
// raised from its default (10): TestContinueAfterErrors nacks 300 times over
// 50 messages and expects none lost, where mqlite, by design, dead-letters a
// message at its queue's MaxDeliveryCount.
var suiteQueue = mqlite.QueueOptions{MaxDeliveryCount: mqlite.MaxDeliveryLimit}

// short runs the suite at its short sizes (100 messages where the full
// run has 10,000; 10 subscriptions where it has 50) in make test: the race
// detector slows the pure-Go SQLite engine some 20 to 50 times, and the
// full sizes take over six minutes for one run under -race on two cores
// (about ten seconds without it). The full sizes run in make crash
// (TestPubSubStress, stress_test.go).
func short(f tests.Features) tests.Features {
	f.ForceShort = true
	return f
}

func fifoQueue() mqlite.QueueOptions {
	q := suiteQueue
	q.Ordering = mqlite.FIFO
	return q
}

func TestPubSub(t *testing.T) {
	s := newSuite(suiteQueue)
	tests.TestPubSub(t, short(standardFeatures), s.pubSub, s.groupPubSub)
}

func TestPubSubFIFO(t *testing.T) {
	s := newSuite(fifoQueue())
	tests.TestPubSub(t, short(fifoFeatures), s.pubSub, s.groupPubSub)
}
