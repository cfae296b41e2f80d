package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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

// grouped returns relaytest.Bodies(n, size, true), message i in group
// "g<i mod groups>".
func grouped(n, size, groups int) []outbox.Message {
	msgs := relaytest.Bodies(n, size, true)
	for i := range msgs {
		msgs[i].GroupID = fmt.Sprintf("g%d", i%groups)
	}
	return msgs
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
	relaytest.Send(t, b.Store, grouped(n, 64, groups)...)
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

// TestBadTopicIsHeld: a message the topic template renders no topic for is
// held (the template is the operator's to fix), never dead-lettered; the
// others go on.
func TestBadTopicIsHeld(t *testing.T) {
	t.Parallel()
	c := fake(t, kfake.SeedTopics(1, "events"))
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b"), Subject: "x"})
	obs := relaytest.Relay(t, b.Store, sink(t, relaykafka.Config{Brokers: c.ListenAddrs(), Topic: "{{if .Subject}}events{{end}}"}), retryAtOnce)
	obs.WaitFor(t, "a delivery and a hold", func(c relaytest.Counts) bool { return c.Completed == 1 && c.Held >= 1 })
	dead, err := b.Store.PeekDeadLetters(ctx, relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Fatalf("dead letters %+v, want none", dead)
	}
	held, err := b.Store.Peek(ctx, relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || string(held[0].Body) != "a" || held[0].State != mqlite.StateLocked {
		t.Fatalf("queue holds %+v, want message a locked", held)
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

// lossyConn is a client connection that can lose the broker's answers to
// produce requests: the broker has written the records, and the client
// sees its connection drop instead of the acknowledgement (the case of a
// broker that fails between its write and its answer).
type lossyConn struct {
	net.Conn
	drop *atomic.Int32 // produce answers still to lose, shared by every connection
	lost *atomic.Int32 // produce answers lost

	mu   sync.Mutex
	keys map[int32]int16 // correlation id → API key of each request written
	rbuf []byte          // the rest of the answer being read
}

// Write passes a request on, noting its API key by its correlation id.
// franz-go writes each request, size prefix and all, in one Write.
func (c *lossyConn) Write(p []byte) (int, error) {
	if len(p) >= 12 && int(binary.BigEndian.Uint32(p)) == len(p)-4 {
		c.mu.Lock()
		c.keys[int32(binary.BigEndian.Uint32(p[8:]))] = int16(binary.BigEndian.Uint16(p[4:]))
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// Read reads whole answers from the broker and hands them on, but closes
// the connection in place of a produce answer it is told to lose.
func (c *lossyConn) Read(p []byte) (int, error) {
	if len(c.rbuf) == 0 {
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c.Conn, body); err != nil {
			return 0, err
		}
		if len(body) >= 4 {
			c.mu.Lock()
			key := c.keys[int32(binary.BigEndian.Uint32(body))]
			c.mu.Unlock()
			if key == int16(kmsg.Produce) && c.drop.Add(-1) >= 0 {
				c.lost.Add(1)
				c.Conn.Close()
				return 0, io.ErrUnexpectedEOF
			}
		}
		c.rbuf = append(size[:], body...)
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

// lossyDialer is a client option whose connections are lossyConns that
// share drop and lost.
func lossyDialer(drop, lost *atomic.Int32) kgo.Opt {
	dialer := &net.Dialer{}
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: conn, drop: drop, lost: lost, keys: map[int32]int16{}}, nil
	})
}

// relayCrash is a Sink that plays a relay killed between a produce and the
// completion of its message: for the first n messages the broker
// acknowledged, it reports a failure, once each, so the relay sends them
// again (as a restarted relay would, finding them unsettled).
type relayCrash struct {
	relay.Sink
	n, crashed atomic.Int32
	once       sync.Map // ids crashed on: each message once
}

var errCrashed = errors.New("test: relay killed after the produce")

func (r *relayCrash) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := r.Sink.Send(ctx, msgs)
	for i, o := range out {
		if !o.Delivered() {
			continue
		}
		if _, again := r.once.LoadOrStore(relay.ID(msgs[i]), true); !again && r.crashed.Add(1) <= r.n.Load() {
			out[i] = relay.RetryAfter(errCrashed, 0)
		}
	}
	return out
}

// TestDuplicatesAndWhatAConsumerSees forces both ways a message can reach
// Kafka twice and reads the topic as a consumer does:
//   - the broker's acknowledgement of 3 produce requests is lost (the
//     connection drops after the broker wrote them): franz-go's idempotent
//     producer sends the same batches again with the same sequence numbers,
//     and the broker keeps one copy;
//   - the relay "dies" after 25 produces were acknowledged and before their
//     messages were completed: it sends them again as new records, and
//     Kafka keeps both copies.
//
// The guarantee asserted: every message is in the topic, exactly 25 have a
// second copy, each copy carries the same HeaderID and key (so on the
// same partition), and a consumer that drops the ids it has seen gets every
// message exactly once, each group's in send order.
func TestDuplicatesAndWhatAConsumerSees(t *testing.T) {
	t.Parallel()
	const n, groups, crashes, lostAcks = 500, 10, 25, 3
	c := fake(t, kfake.SeedTopics(4, "events"))
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, grouped(n, 32, groups)...)
	drop, lost := &atomic.Int32{}, &atomic.Int32{}
	drop.Store(lostAcks)
	s := sink(t, relaykafka.Config{
		Brokers:         c.ListenAddrs(),
		DeliveryTimeout: 10 * time.Minute, // no record times out on a busy machine: each copy is one the test forced
		Options:         []kgo.Opt{lossyDialer(drop, lost)},
	})
	crash := &relayCrash{Sink: s}
	crash.n.Store(crashes)
	opt := retryAtOnce
	opt.Concurrency = 4
	obs := relaytest.Relay(t, b.Store, crash, opt)
	cs := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	relaytest.Empty(t, b.Store)
	if got := lost.Load(); got != lostAcks {
		t.Fatalf("%d produce answers lost, want %d", got, lostAcks)
	}
	if cs.Abandoned != crashes {
		t.Fatalf("%d retries, want the %d crashes alone (a lost answer is the producer's to retry)", cs.Abandoned, crashes)
	}

	recs := readAll(t, c.ListenAddrs(), "events", n+crashes)
	copies := dedupe(t, recs, n)
	twice := 0
	for id, k := range copies {
		switch k {
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("%s: %d copies", id, k)
		}
	}
	if twice != crashes || len(recs) != n+crashes {
		t.Fatalf("%d records, %d messages twice; want %d records, the %d the relay sent again twice (the idempotent producer keeps one copy of a lost answer)",
			len(recs), twice, n+crashes, crashes)
	}
	t.Logf("%d messages: %d produce answers lost (no copy), %d relay crashes (%d copies, same %s and key), %d records",
		n, lostAcks, crashes, twice, relaykafka.HeaderID, len(recs))
}

// TestBrokerLossRelay relays 1,000 messages into a topic of four
// partitions on a kfake cluster of three brokers and, a third of the way
// in, removes the broker that leads partition 0 (its listener closed, its
// partitions led by the others; the producer is told the partition moved):
// the relay goes on, the queue empties, and every message is in the topic.
func TestBrokerLossRelay(t *testing.T) {
	t.Parallel()
	const n, partitions = 1000, 4
	c := fake(t, kfake.NumBrokers(3), kfake.SeedTopics(partitions, "events"))
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, grouped(n, 64, 20)...)
	s := sink(t, relaykafka.Config{Brokers: c.ListenAddrs(), DeliveryTimeout: 10 * time.Second})
	opt := retryAtOnce
	opt.Concurrency = 8
	obs := relaytest.Relay(t, b.Store, s, opt)
	obs.WaitFor(t, "a third", func(c relaytest.Counts) bool { return c.Completed >= n/3 })
	victim := c.LeaderFor("events", 0)
	at := obs.Counts().Completed
	if err := c.RemoveNode(victim); err != nil {
		t.Fatal(err)
	}
	cs := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	relaytest.Empty(t, b.Store)
	seen := map[string]int{}
	recs := readAll(t, c.ListenAddrs(), "events", n)
	for _, r := range recs {
		seen[header(r, relaykafka.HeaderID)]++
	}
	for i := range n {
		if seen[fmt.Sprintf("msg-%d", i)] == 0 {
			t.Fatalf("msg-%d lost", i)
		}
	}
	t.Logf("%d messages; broker %d (leading partition 0) removed after %d deliveries: all in the topic (%d records read), %d retries",
		n, victim, at, len(recs), cs.Abandoned)
}
