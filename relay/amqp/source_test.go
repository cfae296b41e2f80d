package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

func newSource(t testing.TB, addr, queue string, prefetch int) *relayamqp.Source {
	t.Helper()
	src, err := relayamqp.NewSource(relayamqp.SourceConfig{URL: "amqp://guest:guest@" + addr + "/", Queue: queue, IDHeader: "x-id", Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func put(t testing.TB, ch *amqp091.Channel, queue string, p amqp091.Publishing) {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), "", queue, false, false, p); err != nil {
		t.Fatal(err)
	}
}

// ready returns a func that counts the messages of queue ready for a
// consumer (not those delivered and not acknowledged).
func ready(t testing.TB, ch *amqp091.Channel, queue string) func() int64 {
	return func() int64 {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return int64(q.Messages)
	}
}

func TestSourceTakesEachMessageOnceByID(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	put(t, ch, queue, amqp091.Publishing{MessageId: "order-1", Body: []byte("a"),
		Headers: amqp091.Table{relay.HeaderGroupID: "customer-7", "tenant": "acme"}})
	put(t, ch, queue, amqp091.Publishing{Body: []byte("b"), Headers: amqp091.Table{"x-id": "by-header"}})
	put(t, ch, queue, amqp091.Publishing{MessageId: "order-1", Body: []byte("a")}) // a copy
	relaytest.Intake(t, b.Store, newSource(t, addr, queue, 64), relay.IntakeConfig{})
	relaytest.Poll(t, "the queue to be taken", func() bool { return ready(t, ch, queue)() == 0 && relaytest.Total(t, b.Store) == 2 })
	want := []string{`order-1 ` + queue + ` customer-7 {"tenant":"acme"}`, "by-header " + queue + " - -"}
	got := testdb.Strings(t, b.Store.DB(), "SELECT message_id || ' ' || subject || ' ' || coalesce(group_id, '-') || ' ' || coalesce(properties, '-') FROM mqlite_messages ORDER BY id")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queue rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSourceHoldsAsidePoisonedMessages: five messages the queue refuses
// (an id header too long, a message-id not UTF-8, a header not UTF-8,
// headers over the limit, no id at all) among good ones: every good one is
// taken, each poisoned one is held aside in the hold queue, and RabbitMQ
// keeps nothing, ready or unacknowledged.
func TestSourceHoldsAsidePoisonedMessages(t *testing.T) {
	t.Parallel()
	addr, ch, queue := broker(t)
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	poison := []amqp091.Publishing{
		{Headers: amqp091.Table{"x-id": relaytest.LongID}},
		{MessageId: "bad-\xff"},
		{MessageId: "p3", Headers: amqp091.Table{"tenant": "\xfe"}},
		{MessageId: "p4", Headers: amqp091.Table{"big": relaytest.BigHeader}},
		{}, // no id
	}
	reasons := []string{relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldNoMessageID}
	for i, p := range poison {
		put(t, ch, queue, amqp091.Publishing{MessageId: relaytest.Good(i), Body: []byte(relaytest.Good(i))})
		p.Body = []byte(fmt.Sprintf("poison-%d", i))
		put(t, ch, queue, p)
	}
	put(t, ch, queue, amqp091.Publishing{MessageId: relaytest.Good(len(poison)), Body: []byte(relaytest.Good(len(poison)))})
	src := newSource(t, addr, queue, 64)
	relaytest.CheckPoisoned(t, b.Store, src, reasons, ready(t, ch, queue))
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, ch, queue)(); n != 0 {
		t.Fatalf("%d messages back in RabbitMQ after the intake stopped, want none (every one acknowledged)", n)
	}
}

// TestSourceSetsAsideATooLargeMessage: a message over the store's
// MaxMessageBytes is held aside without its body, and RabbitMQ keeps it
// whole: rejected without requeue, to the queue's dead-letter exchange.
func TestSourceSetsAsideATooLargeMessage(t *testing.T) {
	t.Parallel()
	addr, ch, _ := broker(t)
	queue := fmt.Sprintf("mqlite-test-dlx-%d", time.Now().UnixNano())
	dlq := queue + "-dead"
	for _, q := range []struct {
		name string
		args amqp091.Table
	}{{dlq, nil}, {queue, amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q.name, false, false, false) })
	}
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	big := make([]byte, mqlite.DefaultMaxMessageBytes+1)
	put(t, ch, queue, amqp091.Publishing{MessageId: relaytest.Good(0), Body: []byte(relaytest.Good(0))})
	put(t, ch, queue, amqp091.Publishing{MessageId: "big", Body: big})
	put(t, ch, queue, amqp091.Publishing{MessageId: relaytest.Good(1), Body: []byte(relaytest.Good(1))})
	src := newSource(t, addr, queue, 64)
	relaytest.CheckPoisoned(t, b.Store, src, []string{relay.HeldTooLarge}, ready(t, ch, queue))
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, ch, queue)(); n != 0 {
		t.Fatalf("%d messages back in the queue, want none", n)
	}
	relaytest.Poll(t, "the large message in the dead-letter queue", func() bool { return ready(t, ch, dlq)() == 1 })
	d, ok, err := ch.Get(dlq, true)
	if err != nil || !ok || len(d.Body) != len(big) || d.MessageId != "big" {
		t.Fatalf("dead-letter queue: %d bytes, id %q, %v %v; want the large message whole", len(d.Body), d.MessageId, ok, err)
	}
}

func TestSourceHoldsAMissingQueue(t *testing.T) {
	t.Parallel()
	addr, ch, _ := broker(t)
	queue := fmt.Sprintf("mqlite-test-late-%d", time.Now().UnixNano())
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	logs := &relaytest.Logs{}
	relaytest.Intake(t, b.Store, newSource(t, addr, queue, 64), relay.IntakeConfig{
		Logger: logs.Logger(), HoldBackoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
	})
	relaytest.Poll(t, "the hold to be logged", func() bool { return len(logs.Messages()) > 0 })
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	put(t, ch, queue, amqp091.Publishing{MessageId: "a", Body: []byte("a")})
	relaytest.PollGrowth(t, "the message", func() int64 { return relaytest.Total(t, b.Store) }, 1)
	if msgs := logs.Messages(); len(msgs) != 1 || !strings.Contains(msgs[0], "intake: holding") {
		t.Errorf("logs: %q, want the hold once", msgs)
	}
}

func TestSourceNewValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []relayamqp.SourceConfig{
		{Queue: "q"},
		{URL: "amqp://127.0.0.1/"},
		{URL: "http://127.0.0.1/", Queue: "q"},
		{URL: "amqp://127.0.0.1/", Queue: "q", Prefetch: -2},
	} {
		if _, err := relayamqp.NewSource(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relayamqp.ErrInvalidConfig) {
			t.Errorf("NewSource(%+v): %v", cfg, err)
		}
	}
}

const (
	envSourceAddr  = "MQLITE_AMQP_SOURCE_ADDR"
	envSourceQueue = "MQLITE_AMQP_SOURCE_QUEUE"
)

// TestSourceCrashWorker is the intake process of TestSourceCrash.
func TestSourceCrashWorker(t *testing.T) {
	ok := relaytest.SourceWorker(t, func(t *testing.T) relay.Source {
		prefetch := 64
		if relaytest.FinalRound() {
			prefetch = 1 // RabbitMQ's ready count leaves out what it sent ahead
		}
		return newSource(t, os.Getenv(envSourceAddr), os.Getenv(envSourceQueue), prefetch)
	})
	if !ok {
		t.Skip("runs only as the source crash harness's worker process")
	}
}

// TestSourceCrash takes sourceCrashN messages of a RabbitMQ queue into an
// mqlite queue through intake processes that are SIGKILLed between a
// commit and its acknowledgement, and at random: every message ends in
// the queue exactly once. The control acknowledges before the commit, and
// loses the batches its kills fall between the two.
func TestSourceCrash(t *testing.T) {
	t.Parallel()
	relaytest.SourceCrashTest(t, sourceCrashN, sourceCrashKills, func(t *testing.T, n int) relaytest.SourceCrash {
		addr, ch, queue := broker(t)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("msg-%d", i)
			put(t, ch, queue, amqp091.Publishing{MessageId: ids[i], Body: []byte(ids[i])})
		}
		relaytest.Poll(t, "the messages in RabbitMQ", func() bool { return ready(t, ch, queue)() == int64(n) })
		return relaytest.SourceCrash{Worker: "TestSourceCrashWorker", Env: []string{envSourceAddr + "=" + addr, envSourceQueue + "=" + queue},
			Bodies: ids, Unacked: ready(t, ch, queue)}
	})
}
