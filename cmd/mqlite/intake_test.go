package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
)

// intakeFile makes a store file with queue "inbox" of dedup window window,
// closed, and returns its path.
func intakeFile(t *testing.T, window time.Duration) string {
	t.Helper()
	ctx := context.Background()
	path := t.TempDir() + "/app.db"
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "inbox", mqlite.QueueOptions{DedupWindow: window}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRelayFrom: --from takes a far side's messages into the queue, each
// by its id, and counts them in its metrics: the commands of docs/relay.md
// "Into the file", against an embedded JetStream, kfake and the local
// RabbitMQ.
func TestRelayFrom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		source func(t *testing.T, ids ...string) []string // puts ids in the far side; returns the --from flags
	}{
		{"nats", natsSource},
		{"amqp", amqpSource},
		{"kafka", kafkaSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := intakeFile(t, 2*time.Hour)
			from := tc.source(t, "order-1", "order-2")
			rctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(rctx, append([]string{"relay", "--db", path, "--url", "", "--queue", "inbox", "--metrics-addr", "127.0.0.1:0"}, from...),
					strings.NewReader(""), &stdout, &stderr)
			}()
			scrapeUntil(t, &stderr, done, `mqlite_relay_intake_total{outcome="taken",queue="inbox",source="`+tc.name+`"} 2`)
			cancel() // as SIGINT would
			if code := <-done; code != 0 {
				t.Fatalf("exit code %d; stderr %s", code, stderr.String())
			}
			var out bytes.Buffer
			if code := run(context.Background(), []string{"peek", "--db", path, "--url", "", "inbox"}, strings.NewReader(""), &out, &out); code != 0 {
				t.Fatalf("peek: %d %s", code, out.String())
			}
			if !strings.Contains(out.String(), "order-1") || !strings.Contains(out.String(), "order-2") {
				t.Fatalf("peek shows %s", out.String())
			}
		})
	}
}

func natsSource(t *testing.T, ids ...string) []string {
	url, _ := natsWithStream(t)
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := js.Publish(context.Background(), "orders.created", []byte(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--from", "nats", "--nats-url", url, "--stream", "ORDERS"}
}

func amqpSource(t *testing.T, ids ...string) []string {
	const addr = "127.0.0.1:5672"
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testdb.MissingService(t, "RabbitMQ on "+addr, err)
	} else {
		c.Close()
	}
	conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("mqlite-cli-in-%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	for _, id := range ids {
		if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp091.Publishing{MessageId: id, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--from", "amqp", "--amqp-url", "amqp://guest:guest@" + addr + "/", "--amqp-queue", queue}
}

func kafkaSource(t *testing.T, ids ...string) []string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "clicks"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("clicks"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, id := range ids {
		r := &kgo.Record{Value: []byte(id), Headers: []kgo.RecordHeader{{Key: relaykafka.HeaderID, Value: []byte(id)}}}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--from", "kafka", "--kafka-brokers", strings.Join(c.ListenAddrs(), ","), "--kafka-topic", "clicks", "--id-header", relaykafka.HeaderID}
}

// TestRelayFromHoldsAside: a record the queue refuses (an id over the
// limit) is held aside in --hold-queue and counted; the others are taken.
func TestRelayFromHoldsAside(t *testing.T) {
	t.Parallel()
	path := intakeFile(t, 2*time.Hour)
	from := kafkaSource(t, "order-1", strings.Repeat("x", mqlite.MaxMessageIDLen+1), "order-2")
	rctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, append([]string{"relay", "--db", path, "--url", "", "--queue", "inbox", "--hold-queue", "inbox-refused", "--metrics-addr", "127.0.0.1:0"}, from...),
			strings.NewReader(""), &stdout, &stderr)
	}()
	scrapeUntil(t, &stderr, done, `mqlite_relay_intake_total{outcome="taken",queue="inbox",source="kafka"} 2`,
		`mqlite_relay_intake_holds_total{queue="inbox",reason="refused",source="kafka"} 1`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "held aside") || !strings.Contains(stderr.String(), "clicks partition 0 offset 1") {
		t.Errorf("the log does not say what was held aside, from where:\n%s", stderr.String())
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"peek", "--db", path, "--url", "", "inbox-refused"}, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("peek: %d %s", code, out.String())
	}
	if !strings.Contains(out.String(), "xxxx") {
		t.Fatalf("peek of the hold queue shows %s", out.String())
	}
}

// TestRelayFromRefusesAShortDedupWindow: a queue that forgets ids before
// the source can deliver again is refused, with the command that fixes it.
func TestRelayFromRefusesAShortDedupWindow(t *testing.T) {
	t.Parallel()
	url, _ := natsWithStream(t)
	path := intakeFile(t, 0) // the default, 10 minutes, under the default --outage of 1h
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"relay", "--db", path, "--url", "", "--queue", "inbox", "--from", "nats",
		"--nats-url", url, "--stream", "ORDERS"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "mqlite queues update inbox --dedup-window 1h1m0s") {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
}

func TestRelayFromUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"sink and from":     {"relay", "--db", "x.db", "--queue", "q", "--sink", "nats", "--from", "nats", "--stream", "S"},
		"unknown source":    {"relay", "--db", "x.db", "--queue", "q", "--from", "sqs"},
		"nats no stream":    {"relay", "--db", "x.db", "--queue", "q", "--from", "nats"},
		"amqp no queue":     {"relay", "--db", "x.db", "--queue", "q", "--from", "amqp", "--amqp-url", "amqp://127.0.0.1/"},
		"kafka no topic":    {"relay", "--db", "x.db", "--queue", "q", "--from", "kafka", "--kafka-brokers", "127.0.0.1:9092"},
		"from over a --url": {"relay", "--db", "", "--url", "http://127.0.0.1:1", "--queue", "q", "--from", "nats", "--stream", "S"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit code %d, want 2; stderr %s", name, code, stderr.String())
		}
	}
}
