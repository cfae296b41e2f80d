package amqp_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

// broker returns the address of the RabbitMQ on 127.0.0.1:5672 (skipping
// the test when it is unreachable and not required) and a channel on it
// for the test's own declarations, with a fresh durable queue whose name
// it returns; the cleanup deletes the queue.
func broker(t *testing.T) (addr string, ch *amqp091.Channel, queue string) {
	t.Helper()
	addr = relaytest.Service(t, "RabbitMQ", "127.0.0.1:5672")
	conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue = fmt.Sprintf("mqlite-test-%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	return addr, ch, queue
}

// drain takes every message off queue and counts each message-id.
func drain(t *testing.T, ch *amqp091.Channel, queue string) (ids map[string]int, total int) {
	t.Helper()
	ids = map[string]int{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ids, total
		}
		ids[d.MessageId]++
		total++
	}
}

func sink(t *testing.T, cfg relayamqp.Config) *relayamqp.Sink {
	t.Helper()
	s, err := relayamqp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	return s
}

// retryAtOnce is the relay backoff of these tests: the fake clock never
// ends a delay, and the sink's own reconnect backoff spaces the attempts.
var retryAtOnce = relay.Config{Backoff: consumer.Backoff{Initial: -1}}

// traceparent is a valid W3C Trace Context parent.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestPublishesConfirmedWithIDAndHeaders(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{})
	seqs := relaytest.Send(t, b.Store,
		outbox.Message{Body: []byte("a"), Subject: "created", Properties: map[string]string{"tenant": "acme", strings.Repeat("k", 300): "too long a name for AMQP", "traceparent": "malformed"}},
		outbox.Message{Body: []byte("b"), MessageID: "order-9", GroupID: "customer-1", Properties: map[string]string{"traceparent": traceparent}})
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", RoutingKey: queue})
	obs := relaytest.Relay(t, b.Store, s, retryAtOnce)
	obs.WaitFor(t, "both deliveries", func(c relaytest.Counts) bool { return c.Completed == 2 })
	relaytest.Empty(t, b.Store)
	got := map[string]amqp091.Delivery{}
	for range 2 {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		got[d.MessageId] = d
	}
	first := got[fmt.Sprintf("%s:%d", relaytest.Queue, seqs[0])]
	if string(first.Body) != "a" || first.Headers["tenant"] != "acme" || first.Headers[relay.HeaderSubject] != "created" ||
		first.Headers[relay.HeaderSeq] != strconv.FormatInt(seqs[0], 10) || first.DeliveryMode != amqp091.Persistent {
		t.Fatalf("first message %+v", first)
	}
	if len(first.Headers) != 5 { // queue, seq, delivery count, subject, tenant; not the long name, not a malformed traceparent
		t.Fatalf("headers %v", first.Headers)
	}
	if second := got["order-9"]; string(second.Body) != "b" || second.Headers[relay.HeaderGroupID] != "customer-1" ||
		second.Headers["traceparent"] != traceparent { // W3C Trace Context, passed on
		t.Fatalf("second message %+v", second)
	}
}

// holdingRelay relays the test queue of st to s, retrying at once and
// sending held messages again within 20ms, with a spy on the holds and the
// relay's WARN and ERROR logs.
func holdingRelay(t *testing.T, st *mqlite.Store, s relay.Sink) (*relaytest.Observer, relaytest.HoldSpy, *relaytest.Logs) {
	t.Helper()
	logs := &relaytest.Logs{}
	opts := retryAtOnce
	opts.Logger = logs.Logger()
	opts.HoldBackoff = consumer.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	spy := relaytest.HoldSpy{Sink: s, Held: make(chan error, 1)}
	return relaytest.Relay(t, st, spy, opts), spy, logs
}

// TestUnroutableIsHeld: a message no queue is bound for is returned, and
// the relay holds it (no delivery counted, logged once) until the test
// binds a queue; then it goes through on its first delivery.
func TestUnroutableIsHeld(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a"), Subject: "missing"})
	if err := ch.ExchangeDeclare(queue+"-x", "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(queue+"-x", false, false) })
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", Exchange: queue + "-x", RoutingKey: "{{.Subject}}"})
	obs, spy, logs := holdingRelay(t, b.Store, s)
	relaytest.WaitHolds(t, spy, 3, relayamqp.ErrReturned)
	if err := ch.QueueBind(queue, "missing", queue+"-x", false, nil); err != nil {
		t.Fatal(err)
	}
	c := obs.WaitFor(t, "the delivery", func(c relaytest.Counts) bool { return c.Completed == 1 })
	if c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("%d abandoned, %d rejected: the held message was counted", c.Abandoned, c.Rejected)
	}
	relaytest.Empty(t, b.Store)
	if ids, _ := drain(t, ch, queue); len(ids) != 1 {
		t.Fatalf("queue holds %v", ids)
	}
	if got := logs.Messages(); len(got) != 1 {
		t.Fatalf("logs %q, want the hold said once", got)
	}
}

// TestQuorumQueue relays into a quorum queue (x-queue-type: quorum), the
// replicated queue type of a RabbitMQ cluster, with confirms and the
// mandatory flag: every message arrives, each with its message-id.
func TestQuorumQueue(t *testing.T) {
	t.Parallel()
	const n = 2000
	addr, ch, _ := broker(t)
	queue := fmt.Sprintf("mqlite-test-quorum-%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	st := relaytest.OpenWallClock(t)
	relaytest.Send(t, st, relaytest.Bodies(n, 128, true)...)
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", RoutingKey: queue})
	opts := retryAtOnce
	opts.Concurrency = 8
	relaytest.WaitEmpty(t, st, relaytest.Relay(t, st, s, opts))
	ids, total := drain(t, ch, queue)
	for i := range n {
		if ids[fmt.Sprintf("msg-%d", i)] == 0 {
			t.Fatalf("msg-%d missing from the quorum queue", i)
		}
	}
	t.Logf("%d messages into a quorum queue: %d stored (%d copies)", n, total, total-n)
}

func TestConnectionCutLosesNothing(t *testing.T) {
	t.Parallel()
	const n = 5000
	addr, ch, queue := broker(t)
	p := newProxy(t, addr)
	st := relaytest.OpenWallClock(t) // a settlement that times out under load heals by its lease
	relaytest.Send(t, st, relaytest.Bodies(n, 64, false)...)
	s := sink(t, relayamqp.Config{
		URL: "amqp://guest:guest@" + p.addr() + "/", RoutingKey: queue, ConfirmTimeout: 5 * time.Second,
		Reconnect: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	opts := retryAtOnce
	opts.Concurrency = 8
	obs := relaytest.Relay(t, st, s, opts)

	// Cut the connection twice mid-stream: the sink reconnects through
	// the proxy and the relay sends again what was not confirmed.
	for _, at := range []int{1000, 3000} {
		obs.WaitFor(t, fmt.Sprint(at, " deliveries"), func(c relaytest.Counts) bool { return c.Completed >= at })
		p.cut()
	}
	relaytest.WaitEmpty(t, st, obs)
	c := obs.Counts()
	ids, total := drain(t, ch, queue)
	for i := range n {
		if ids[fmt.Sprintf("%s:%d", relaytest.Queue, i+1)] == 0 {
			t.Fatalf("message %d lost", i+1)
		}
	}
	if len(ids) != n {
		t.Fatalf("%d distinct ids, want %d", len(ids), n)
	}
	t.Logf("%d messages, 2 cuts: %d published, %d duplicates (same message-id, for the consumer to drop), %d retries",
		n, total, total-n, c.Abandoned)
}

func TestUnreachableBrokerIsRetried(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")})
	// A port nothing listens on: close a listener to free one.
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + closedPort(t) + "/", DialTimeout: time.Second,
		Reconnect: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	obs := relaytest.Relay(t, b.Store, s, retryAtOnce)
	c := obs.WaitFor(t, "two retries", func(c relaytest.Counts) bool { return c.Abandoned >= 2 })
	if c.Completed != 0 || c.Rejected != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]relayamqp.Config{
		"no URL":           {},
		"bad URL":          {URL: "http://127.0.0.1/"},
		"bad template":     {URL: "amqp://127.0.0.1/", RoutingKey: "{{"},
		"negative timeout": {URL: "amqp://127.0.0.1/", ConfirmTimeout: -1},
	} {
		if _, err := relayamqp.New(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relayamqp.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestMissingExchangeIsHeld: publishing to an exchange that does not exist
// makes the broker close the channel (404 NOT_FOUND). The sink opens a new
// channel and the relay holds the message (no delivery counted, nothing
// dead-lettered, logged once) until the test declares the exchange; then
// it goes through on its first delivery.
func TestMissingExchangeIsHeld(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a"), Subject: "k"})
	exchange := queue + "-missing"
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", Exchange: exchange, RoutingKey: "{{.Subject}}"})
	obs, spy, logs := holdingRelay(t, b.Store, s)
	relaytest.WaitHolds(t, spy, 3, relayamqp.ErrNoExchange)
	if c := obs.Counts(); c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("%d abandoned, %d rejected while the exchange is missing: the held message was counted", c.Abandoned, c.Rejected)
	}
	if err := ch.ExchangeDeclare(exchange, "direct", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "k", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	c := obs.WaitFor(t, "the delivery", func(c relaytest.Counts) bool { return c.Completed == 1 })
	if c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("%d abandoned, %d rejected: the held message was counted", c.Abandoned, c.Rejected)
	}
	relaytest.Empty(t, b.Store)
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if n := d.Headers[relay.HeaderDeliveryCount]; n != int32(1) {
		t.Fatalf("delivered with %s %v, want 1", relay.HeaderDeliveryCount, n)
	}
	if got := logs.Messages(); len(got) != 1 {
		t.Fatalf("logs %q, want the hold said once", got)
	}
}

// TestUnrenderableRoutingKeyIsHeld: a routing key the template cannot
// render is the operator's to fix: the message is held (no delivery
// counted, nothing dead-lettered, said once), never dead-lettered.
func TestUnrenderableRoutingKeyIsHeld(t *testing.T) {
	t.Parallel()
	addr, _, _ := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")})
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", RoutingKey: "{{.Subject.Missing}}"})
	obs, spy, logs := holdingRelay(t, b.Store, s)
	relaytest.WaitHolds(t, spy, 3, relay.ErrNoRoute)
	if c := obs.Counts(); c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("%d abandoned, %d rejected: the held message was counted", c.Abandoned, c.Rejected)
	}
	if got := logs.Messages(); len(got) != 1 || !strings.Contains(got[0], "template") {
		t.Fatalf("logs %q, want the template's fault said once", got)
	}
}
