package watermill_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	mqwatermill "github.com/mqlite/mqlite/watermill"
)

// testBundle is what setup gives a test: a fresh store with one queue.
type testBundle struct {
	st    *mqlite.Store
	queue string
}

func setup(t *testing.T, qopts mqlite.QueueOptions) testBundle {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := st.CreateQueue(ctx, "events", qopts); err != nil {
		t.Fatal(err)
	}
	return testBundle{st: st, queue: "events"}
}

func (b testBundle) subscribe(t *testing.T, cfg mqwatermill.SubscriberConfig) (*mqwatermill.Subscriber, <-chan *message.Message) {
	t.Helper()
	cfg.Logger = quiet
	sub, err := mqwatermill.NewSubscriber(b.st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(context.Background(), b.queue)
	if err != nil {
		t.Fatal(err)
	}
	return sub, msgs
}

func (b testBundle) publisher(t *testing.T, cfg mqwatermill.PublisherConfig) *mqwatermill.Publisher {
	t.Helper()
	pub, err := mqwatermill.NewPublisher(b.st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// publish publishes one message per id, with the id as payload.
func (b testBundle) publish(t *testing.T, ids ...string) {
	t.Helper()
	msgs := make([]*message.Message, len(ids))
	for i, id := range ids {
		msgs[i] = message.NewMessage(id, []byte(id))
	}
	if err := b.publisher(t, mqwatermill.PublisherConfig{}).Publish(b.queue, msgs...); err != nil {
		t.Fatal(err)
	}
}

func (b testBundle) peek(t *testing.T) []mqlite.Message {
	t.Helper()
	msgs, err := b.st.Peek(context.Background(), b.queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// next waits for the next message, failing the test after a timeout.
func next(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("messages channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

func TestTxPublishRolledBackIsNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	ctx := context.Background()
	errRollback := errors.New("roll back")

	publishInTx := func(id string, fail error) error {
		return b.st.Tx(ctx, func(tx *mqlite.Tx) error {
			pub, err := mqwatermill.NewTxPublisher(tx.SQL(), mqwatermill.PublisherConfig{})
			if err != nil {
				return err
			}
			if err := pub.Publish(b.queue, message.NewMessage(id, []byte(id))); err != nil {
				return err
			}
			return fail
		})
	}
	if err := publishInTx("rolled-back", errRollback); !errors.Is(err, errRollback) {
		t.Fatalf("Tx = %v, want %v", err, errRollback)
	}
	// Published after the rolled-back one: a Standard queue hands its
	// messages out in sequence order, so had the first one been written,
	// the subscription would see it first.
	if err := publishInTx("committed", nil); err != nil {
		t.Fatal(err)
	}
	if got := b.peek(t); len(got) != 1 || got[0].MessageID != "committed" {
		t.Fatalf("queue holds %+v, want only the committed message", got)
	}

	sub, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	m := next(t, msgs)
	if m.UUID != "committed" {
		t.Fatalf("first delivery %q, want the committed message", m.UUID)
	}
	m.Ack()
	if err := sub.Close(); err != nil { // waits for the Ack's Complete
		t.Fatal(err)
	}
	if got := b.peek(t); len(got) != 0 {
		t.Fatalf("queue holds %d messages after the Ack, want 0", len(got))
	}
}

func TestPublishMapsUUIDMetadataAndGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	pub := b.publisher(t, mqwatermill.PublisherConfig{GroupIDFunc: mqwatermill.GroupIDFromMetadata("order_id")})
	in := message.NewMessage("uuid-1", []byte(`{"total":12}`))
	in.Metadata.Set("order_id", "42")
	in.Metadata.Set("trace", "abc")
	if err := pub.Publish(b.queue, in); err != nil {
		t.Fatal(err)
	}

	got := b.peek(t)
	if len(got) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(got))
	}
	if m := got[0]; m.MessageID != "uuid-1" || m.GroupID != "42" || string(m.Body) != `{"total":12}` ||
		m.Properties["order_id"] != "42" || m.Properties["trace"] != "abc" {
		t.Fatalf("stored %+v", m)
	}

	_, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	out := next(t, msgs)
	defer out.Ack()
	if out.UUID != in.UUID || string(out.Payload) != string(in.Payload) ||
		out.Metadata.Get("order_id") != "42" || out.Metadata.Get("trace") != "abc" {
		t.Fatalf("received %q %q %v, want %q %q %v", out.UUID, out.Payload, out.Metadata, in.UUID, in.Payload, in.Metadata)
	}
}

func TestReceiveWithoutMessageIDGetsQueueSeq(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	var seq int64
	err := b.st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		var err error
		seq, err = outboxSend(tx, b.queue)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	m := next(t, msgs)
	defer m.Ack()
	if want := b.queue + ":" + itoa(seq); m.UUID != want {
		t.Fatalf("UUID %q, want %q", m.UUID, want)
	}
}

func TestPublishDeduplicatesByUUID(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	pub := b.publisher(t, mqwatermill.PublisherConfig{})
	for range 2 {
		if err := pub.Publish(b.queue, message.NewMessage("same", []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.peek(t); len(got) != 1 {
		t.Fatalf("queue holds %d messages, want 1 (the resend is a duplicate)", len(got))
	}
	err := pub.Publish(b.queue, message.NewMessage("same", []byte("other body")))
	if !errors.Is(err, mqlite.ErrDuplicateConflict) {
		t.Fatalf("same UUID, other payload: %v, want ErrDuplicateConflict", err)
	}
	// A Publish is one transaction: a conflict in it writes none of it.
	err = pub.Publish(b.queue, message.NewMessage("fresh", []byte("y")), message.NewMessage("same", []byte("z")))
	if !errors.Is(err, mqlite.ErrDuplicateConflict) {
		t.Fatalf("batch with a conflict: %v, want ErrDuplicateConflict", err)
	}
	if got := b.peek(t); len(got) != 1 {
		t.Fatalf("queue holds %d messages, want 1 (the conflicting batch rolled back)", len(got))
	}
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	pub := b.publisher(t, mqwatermill.PublisherConfig{})
	if err := pub.Publish(b.queue, message.NewMessage("", []byte("x"))); !errors.Is(err, mqlite.ErrInvalidMessage) {
		t.Errorf("empty UUID: %v, want ErrInvalidMessage", err)
	}
	if err := pub.Publish("missing", message.NewMessage("a", []byte("x"))); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Errorf("missing queue: %v, want ErrQueueNotFound", err)
	}
	if _, err := mqwatermill.NewTxPublisher(b.st.DB(), mqwatermill.PublisherConfig{AutoCreateQueues: true}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("NewTxPublisher with AutoCreateQueues: %v, want ErrInvalidArgument", err)
	}
	if _, err := mqwatermill.NewPublisher(nil, mqwatermill.PublisherConfig{}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("NewPublisher(nil): %v, want ErrInvalidArgument", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(b.queue, message.NewMessage("b", []byte("x"))); !errors.Is(err, mqwatermill.ErrPublisherClosed) {
		t.Errorf("after Close: %v, want ErrPublisherClosed", err)
	}
}

func TestPublishAutoCreatesQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	pub := b.publisher(t, mqwatermill.PublisherConfig{
		AutoCreateQueues: true, QueueOptions: mqlite.QueueOptions{Ordering: mqlite.FIFO},
	})
	if err := pub.Publish("created", message.NewMessage("a", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	q, err := b.st.GetQueue(context.Background(), "created")
	if err != nil {
		t.Fatal(err)
	}
	if q.Options.Ordering != mqlite.FIFO {
		t.Fatalf("created queue has ordering %v, want the configured FIFO", q.Options.Ordering)
	}
}

func TestSubscribeErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	sub, err := mqwatermill.NewSubscriber(b.st, mqwatermill.SubscriberConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(context.Background(), "missing"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Errorf("missing queue: %v, want ErrQueueNotFound", err)
	}
	if err := sub.SubscribeInitialize("missing"); err != nil {
		t.Fatal(err)
	}
	if err := sub.SubscribeInitialize("missing"); err != nil {
		t.Errorf("SubscribeInitialize of an existing queue: %v, want nil", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(context.Background(), b.queue); !errors.Is(err, mqwatermill.ErrSubscriberClosed) {
		t.Errorf("after Close: %v, want ErrSubscriberClosed", err)
	}
	for _, cfg := range []mqwatermill.SubscriberConfig{
		{Concurrency: -1},
		{Prefetch: -2},
		{NackBackoff: mqliteBackoff(-5 * time.Second)},
	} {
		if _, err := mqwatermill.NewSubscriber(b.st, cfg); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("NewSubscriber(%+v): %v, want ErrInvalidArgument", cfg, err)
		}
	}
	if _, err := mqwatermill.NewSubscriber(nil, mqwatermill.SubscriberConfig{}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("NewSubscriber(nil): %v, want ErrInvalidArgument", err)
	}
}

func TestNackRedeliversAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	b.publish(t, "a")
	_, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	start := time.Now()
	first := next(t, msgs)
	first.Nack()
	select {
	case <-first.Context().Done(): // the delivery ended with the Nack
	case <-time.After(10 * time.Second):
		t.Fatal("message context not cancelled after Nack")
	}
	again := next(t, msgs)
	again.Ack()
	if again.UUID != "a" {
		t.Fatalf("redelivered %q, want a", again.UUID)
	}
	// No delay by default: well under the store's 1s scheduler tick.
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Errorf("Nack took %v to come back, want no delay", took)
	}
}

func TestCloseGivesBackHeldMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	b.publish(t, "a", "b")
	sub, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	held := next(t, msgs) // "b" is claimed ahead (Prefetch) and not handed out
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Context().Done():
	default:
		t.Error("held message's context not cancelled by Close")
	}
	if _, ok := <-msgs; ok {
		t.Error("messages channel still open after Close")
	}
	for _, m := range b.peek(t) {
		if m.State != mqlite.StateActive {
			t.Errorf("message %s is %s after Close, want %s", m.MessageID, m.State, mqlite.StateActive)
		}
	}
	if held.Ack() && len(b.peek(t)) != 2 {
		t.Error("an Ack after Close settled the message")
	}
}

func TestSubscribeCtxStopsSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	sub, err := mqwatermill.NewSubscriber(b.st, mqwatermill.SubscriberConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, b.queue)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-msgs:
		if ok {
			t.Fatal("message on an empty queue")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after the Subscribe ctx was cancelled")
	}
}

// TestLeaseRenewedWhileMessageIsHeld is not parallel: Loop renews at half
// the remaining lease, and under -race a renewal queued behind other tests'
// statements on a loaded machine can take longer than that half (it did
// with a 200ms lease). Alone, a 1s lease leaves it 500ms.
func TestLeaseRenewedWhileMessageIsHeld(t *testing.T) {
	lock := time.Second
	b := setup(t, mqlite.QueueOptions{LockDuration: lock})
	b.publish(t, "slow")
	sub, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	m := next(t, msgs)
	// Hold the message for three lease durations: a handler at work.
	select {
	case <-time.After(3 * lock):
	case <-m.Context().Done():
		t.Fatalf("lease lost while held: %v", context.Cause(m.Context()))
	}
	m.Ack()
	if err := sub.Close(); err != nil { // waits for the Complete
		t.Fatal(err)
	}
	// The Complete needed the first delivery's token and a running lease,
	// long past the first lease's end: only renewals make that true.
	if got := b.peek(t); len(got) != 0 {
		t.Fatalf("queue holds %+v after the Ack, want nothing", got)
	}
}

func TestGroupIDOrdersWithinGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, mqlite.QueueOptions{})
	pub := b.publisher(t, mqwatermill.PublisherConfig{
		GroupIDFunc: func(_ string, m *message.Message) string { return m.Metadata.Get("key") },
	})
	const perGroup = 20
	var batch []*message.Message
	for i := range perGroup {
		for _, g := range []string{"a", "b", "c"} {
			m := message.NewMessage(g+itoa(int64(i)), []byte(itoa(int64(i))))
			m.Metadata.Set("key", g)
			batch = append(batch, m)
		}
	}
	if err := pub.Publish(b.queue, batch...); err != nil {
		t.Fatal(err)
	}
	// Four messages out at once and a Nack of every third one: the groups
	// still come in order, each message after its predecessor's Ack.
	_, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{Concurrency: 4})
	nextIn := map[string]int64{}
	nacked := map[string]bool{}
	for done := 0; done < len(batch); {
		m := next(t, msgs)
		g := m.Metadata.Get("key")
		if want := itoa(nextIn[g]); string(m.Payload) != want {
			t.Fatalf("group %s: got %s, want %s", g, m.Payload, want)
		}
		if !nacked[m.UUID] && nextIn[g]%3 == 0 {
			nacked[m.UUID] = true
			m.Nack()
			continue
		}
		nextIn[g]++
		done++
		m.Ack()
	}
}

// outboxSend sends one message with no MessageID straight through the
// outbox, as code that does not use Watermill would.
func outboxSend(tx *mqlite.Tx, queue string) (int64, error) {
	return outbox.SendOne(tx.Context(), tx.SQL(), queue, outbox.Message{Body: []byte("plain")})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func mqliteBackoff(initial time.Duration) consumer.Backoff { return consumer.Backoff{Initial: initial} }

func TestRedeliveredAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mq.db")
	st, err := mqlite.Open(ctx, path, mqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() }) // Close is idempotent
	b := testBundle{st: st, queue: "events"}
	if err := st.CreateQueue(ctx, b.queue, mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "a")
	sub, msgs := b.subscribe(t, mqwatermill.SubscriberConfig{})
	held := next(t, msgs)
	// The store goes away under the subscription, as in a crash: the
	// lease stays in the file, since nothing can give the message back.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	held.Ack() // too late: the store is closed, the Ack settles nothing

	st2, err := mqlite.Open(ctx, path, mqlite.Config{Logger: quiet}) // recovery releases the lease
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st2.Close() })
	b2 := testBundle{st: st2, queue: b.queue}
	_, msgs2 := b2.subscribe(t, mqwatermill.SubscriberConfig{})
	again := next(t, msgs2)
	again.Ack()
	if again.UUID != "a" {
		t.Fatalf("after the crash got %q, want a again", again.UUID)
	}
}
