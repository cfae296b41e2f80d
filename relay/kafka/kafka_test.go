package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
)

var ctx = context.Background()

// fake starts a kfake cluster of one broker with opts, shut down by the
// test's cleanup (a restarted one replaces it there).
func fake(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func sink(t *testing.T, cfg relaykafka.Config) *relaykafka.Sink {
	t.Helper()
	s, err := relaykafka.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// retryAtOnce is the relay backoff of these tests: the fake clock never
// ends a delay.
var retryAtOnce = relay.Config{Backoff: consumer.Backoff{Initial: -1}}

// readAll consumes topic from the start until it has read n records.
func readAll(t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, relaytest.Timeout)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(recs), n, rctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// traceparent is a valid W3C Trace Context parent.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestProducesWithKeyIDAndHeaders(t *testing.T) {
	t.Parallel()
	c := fake(t, kfake.SeedTopics(3, "events"))
	b := relaytest.Open(t, mqlite.QueueOptions{})
	seqs := relaytest.Send(t, b.Store,
		outbox.Message{Body: []byte("a"), Subject: "created", Properties: map[string]string{"tenant": "acme", "traceparent": "malformed"}},
		outbox.Message{Body: []byte("b"), MessageID: "order-9", GroupID: "customer-1", Properties: map[string]string{"traceparent": traceparent}})
	obs := relaytest.Relay(t, b.Store, sink(t, relaykafka.Config{Brokers: c.ListenAddrs()}), retryAtOnce)
	obs.WaitFor(t, "both deliveries", func(c relaytest.Counts) bool { return c.Completed == 2 })
	relaytest.Empty(t, b.Store)
	byID := map[string]*kgo.Record{}
	for _, r := range readAll(t, c.ListenAddrs(), "events", 2) {
		byID[header(r, relaykafka.HeaderID)] = r
	}
	first := byID[fmt.Sprintf("%s:%d", relaytest.Queue, seqs[0])]
	if first == nil || string(first.Value) != "a" || first.Key != nil || header(first, "tenant") != "acme" ||
		header(first, relay.HeaderSubject) != "created" || header(first, relay.HeaderSeq) != strconv.FormatInt(seqs[0], 10) ||
		header(first, relay.HeaderDeliveryCount) != "1" || header(first, "traceparent") != "" {
		t.Fatalf("first record %+v", first)
	}
	second := byID["order-9"]
	if second == nil || string(second.Value) != "b" || string(second.Key) != "customer-1" ||
		header(second, relay.HeaderGroupID) != "customer-1" || header(second, "traceparent") != traceparent {
		t.Fatalf("second record %+v", second)
	}
}

// freePort returns a port that was free a moment ago on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestBrokerRestartLosesNothing relays 5,000 messages in 20 groups while
// the broker is shut down and started again on the same port and data dir,
// twice. Every message reaches the topic; the copies of messages whose
// acknowledgement was lost carry the same HeaderID and are counted; each
// group's messages are on one partition, first copies in send order.
func TestBrokerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	const n, groups = 5000, 20
	port, dir := freePort(t), t.TempDir()
	opts := []kfake.Opt{kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(4, "events")}
	c := fake(t, opts...)
	b := relaytest.Open(t, mqlite.QueueOptions{})
	msgs := relaytest.Bodies(n, 64, true)
	for i := range msgs {
		msgs[i].GroupID = fmt.Sprintf("g%d", i%groups)
	}
	relaytest.Send(t, b.Store, msgs...)
	s := sink(t, relaykafka.Config{Brokers: c.ListenAddrs(), DeliveryTimeout: 5 * time.Second})
	opt := retryAtOnce
	opt.Concurrency = 8
	obs := relaytest.Relay(t, b.Store, s, opt)
	for _, at := range []int{n / 4, n / 2} {
		obs.WaitFor(t, fmt.Sprint(at, " deliveries"), func(c relaytest.Counts) bool { return c.Completed >= at })
		c.Close()
		c = fake(t, opts...) // the same port and data dir
	}
	cs := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	relaytest.Empty(t, b.Store)

	// Read until every id was seen: copies may come before the last first.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, relaytest.Timeout)
	defer cancel()
	seen := map[string]int{}
	partition := map[string]int32{}
	last := map[string]int{} // group → index of its last first copy
	total := 0
	for len(seen) < n {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("read %d distinct ids of %d: %v", len(seen), n, rctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			total++
			id := header(r, relaykafka.HeaderID)
			seen[id]++
			g := string(r.Key)
			if p, ok := partition[g]; ok && p != r.Partition {
				t.Errorf("group %s on partitions %d and %d", g, p, r.Partition)
			}
			partition[g] = r.Partition
			if seen[id] > 1 {
				return
			}
			i, _ := strconv.Atoi(id[len("msg-"):])
			if prev, ok := last[g]; ok && i < prev {
				t.Errorf("group %s: msg-%d after msg-%d", g, i, prev)
			}
			last[g] = i
		})
	}
	for i := range n {
		if seen[fmt.Sprintf("msg-%d", i)] == 0 {
			t.Fatalf("msg-%d lost", i)
		}
	}
	t.Logf("%d messages, 2 broker restarts: %d records read so far, %d copies (same %s), %d retries",
		n, total, total-n, relaykafka.HeaderID, cs.Abandoned)
}

// TestNoTopicHoldsTheMessages: a relay pointed at a cluster without its
// topic says so once and keeps the messages (no delivery counted, nothing
// dead-lettered, on a queue that dead-letters at the second delivery);
// once the topic exists, every message goes out.
func TestNoTopicHoldsTheMessages(t *testing.T) {
	t.Parallel()
	const n = 50
	c := fake(t)
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 16, false)...)
	logs := &relaytest.Logs{}
	spy := relaytest.HoldSpy{Sink: sink(t, relaykafka.Config{Brokers: c.ListenAddrs()}), Held: make(chan error, 1)}
	obs := relaytest.Relay(t, b.Store, spy, relay.Config{
		Logger: logs.Logger(), Backoff: consumer.Backoff{Initial: -1},
		HoldBackoff: consumer.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond},
	})
	relaytest.WaitHolds(t, spy, 2, relaykafka.ErrNoTopic)
	createTopic(t, c.ListenAddrs(), "events")
	cs := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	if cs.Abandoned != 0 || cs.Rejected != 0 {
		t.Fatalf("%d abandoned, %d rejected: held messages were counted", cs.Abandoned, cs.Rejected)
	}
	relaytest.Empty(t, b.Store)
	if got := logs.Messages(); len(got) != 1 {
		t.Fatalf("logs %q, want the hold said once", got)
	}
	if recs := readAll(t, c.ListenAddrs(), "events", n); len(recs) != n {
		t.Fatalf("%d records", len(recs))
	}
}

func createTopic(t *testing.T, addrs []string, name string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create topic: error code %d", code)
	}
}

func TestBadTopicIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := fake(t, kfake.SeedTopics(1, "events"))
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b"), Subject: "x"})
	obs := relaytest.Relay(t, b.Store, sink(t, relaykafka.Config{Brokers: c.ListenAddrs(), Topic: "{{if .Subject}}events{{end}}"}), retryAtOnce)
	obs.WaitFor(t, "a delivery and a dead letter", func(c relaytest.Counts) bool { return c.Completed == 1 && c.Rejected == 1 })
	dead, err := b.Store.PeekDeadLetters(ctx, relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || string(dead[0].Body) != "a" || dead[0].DeadLetterReason != "kafka: bad topic" {
		t.Fatalf("dead letters %+v", dead)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]relaykafka.Config{
		"no brokers":       {},
		"bad template":     {Brokers: []string{"127.0.0.1:9092"}, Topic: "{{"},
		"negative timeout": {Brokers: []string{"127.0.0.1:9092"}, DeliveryTimeout: -1},
	} {
		if _, err := relaykafka.New(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relaykafka.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}
