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
var retryAtOnce = relay.Options{Backoff: consumer.Backoff{Initial: -1}}

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

func TestUnroutableIsRetried(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a"), Subject: "missing"})
	// The first attempts go to a routing key no queue is bound to; once
	// the test binds one, the message goes through.
	if err := ch.ExchangeDeclare(queue+"-x", "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(queue+"-x", false, false) })
	s := sink(t, relayamqp.Config{URL: "amqp://guest:guest@" + addr + "/", Exchange: queue + "-x", RoutingKey: "{{.Subject}}"})
	obs := relaytest.Relay(t, b.Store, s, retryAtOnce)
	c := obs.WaitFor(t, "a return", func(c relaytest.Counts) bool { return c.Abandoned >= 1 })
	if !errors.Is(c.Causes[0], relayamqp.ErrReturned) {
		t.Fatalf("cause %v, want ErrReturned", c.Causes[0])
	}
	if err := ch.QueueBind(queue, "missing", queue+"-x", false, nil); err != nil {
		t.Fatal(err)
	}
	obs.WaitFor(t, "the delivery", func(c relaytest.Counts) bool { return c.Completed == 1 })
	relaytest.Empty(t, b.Store)
	if ids, _ := drain(t, ch, queue); len(ids) != 1 {
		t.Fatalf("queue holds %v", ids)
	}
}

func TestConnectionCutLosesNothing(t *testing.T) {
	t.Parallel()
	const n = 5000
	addr, ch, queue := broker(t)
	p := newProxy(t, addr)
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 64, false)...)
	s := sink(t, relayamqp.Config{
		URL: "amqp://guest:guest@" + p.addr() + "/", RoutingKey: queue, ConfirmTimeout: 5 * time.Second,
		Reconnect: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	opts := retryAtOnce
	opts.Concurrency = 8
	obs := relaytest.Relay(t, b.Store, s, opts)

	// Cut the connection twice mid-stream: the sink reconnects through
	// the proxy and the relay sends again what was not confirmed.
	for _, at := range []int{1000, 3000} {
		obs.WaitFor(t, fmt.Sprint(at, " deliveries"), func(c relaytest.Counts) bool { return c.Completed >= at })
		p.cut()
	}
	c := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	relaytest.Empty(t, b.Store)
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
