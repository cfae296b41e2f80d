package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
)

// sourceGroup is the tests' consumer group.
const sourceGroup = "intake"

func newSource(t testing.TB, addrs []string, opts ...kgo.Opt) *relaykafka.Source {
	t.Helper()
	src, err := relaykafka.NewSource(relaykafka.SourceConfig{
		Brokers: addrs, Topics: []string{"in"}, Group: sourceGroup, IDHeader: relaykafka.HeaderID,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, Options: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

// produce writes recs to the topic "in" and waits for their acks.
func produce(t testing.TB, addrs []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestSourceTakesEachRecordOnceByID(t *testing.T) {
	t.Parallel()
	c := fake(t, kfake.SeedTopics(1, "in"))
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	produce(t, c.ListenAddrs(),
		&kgo.Record{Value: []byte("a"), Headers: []kgo.RecordHeader{
			{Key: relaykafka.HeaderID, Value: []byte("order-1")}, {Key: relay.HeaderGroupID, Value: []byte("customer-7")}, {Key: "tenant", Value: []byte("acme")},
		}},
		&kgo.Record{Value: []byte("b")}, // no id header: topic/partition/offset
		&kgo.Record{Value: []byte("a"), Headers: []kgo.RecordHeader{{Key: relaykafka.HeaderID, Value: []byte("order-1")}}}, // a copy
	)
	relaytest.Intake(t, b.Store, newSource(t, c.ListenAddrs()), relay.IntakeConfig{})
	u := unacked(t, c.ListenAddrs(), 1)
	relaytest.Poll(t, "the group to commit every record", func() bool { return u() == 0 })
	want := []string{`order-1 in customer-7 {"tenant":"acme"}`, "in/0/1 in - -"}
	got := testdb.Strings(t, b.Store.DB(), "SELECT message_id || ' ' || subject || ' ' || coalesce(group_id, '-') || ' ' || coalesce(properties, '-') FROM mqlite_messages ORDER BY id")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queue rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSourceHoldsAsidePoisonedMessages: five records the queue refuses
// (an id too long, an id not UTF-8, a header not UTF-8, headers over the
// limit, a group id too long) among good ones: every good one is taken,
// each poisoned one is held aside in the hold queue, and the group commits
// past them all.
func TestSourceHoldsAsidePoisonedMessages(t *testing.T) {
	t.Parallel()
	c := fake(t, kfake.SeedTopics(1, "in"))
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	id := func(v string) kgo.RecordHeader { return kgo.RecordHeader{Key: relaykafka.HeaderID, Value: []byte(v)} }
	poison := [][]kgo.RecordHeader{
		{id(relaytest.LongID)},
		{id("bad-\xff")},
		{id("p3"), {Key: "tenant", Value: []byte("\xfe")}},
		{id("p4"), {Key: "big", Value: []byte(relaytest.BigHeader)}},
		{id("p5"), {Key: relay.HeaderGroupID, Value: []byte(strings.Repeat("g", mqlite.MaxGroupIDLen+1))}},
	}
	var recs []*kgo.Record
	for i, h := range poison {
		recs = append(recs, &kgo.Record{Value: []byte(relaytest.Good(i)), Headers: []kgo.RecordHeader{id(relaytest.Good(i))}},
			&kgo.Record{Value: []byte(fmt.Sprintf("poison-%d", i)), Headers: h})
	}
	recs = append(recs, &kgo.Record{Value: []byte(relaytest.Good(len(poison))), Headers: []kgo.RecordHeader{id(relaytest.Good(len(poison)))}})
	produce(t, c.ListenAddrs(), recs...)
	reasons := []string{relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid}
	relaytest.CheckPoisoned(t, b.Store, newSource(t, c.ListenAddrs()), reasons, unacked(t, c.ListenAddrs(), 1))
}

// unacked returns a func that counts the records of the topic "in" past
// the group's committed offsets.
func unacked(t testing.TB, addrs []string, partitions int32) func() int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func() int64 {
		rctx, cancel := context.WithTimeout(ctx, relaytest.Timeout)
		defer cancel()
		lo := kmsg.NewPtrListOffsetsRequest()
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "in"
		for p := range partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp = p, -1
			lt.Partitions = append(lt.Partitions, lp)
		}
		lo.Topics = append(lo.Topics, lt)
		lresp, err := lo.RequestWith(rctx, cl)
		if err != nil {
			t.Fatalf("list offsets: %v", err)
		}
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group = sourceGroup
		oresp, err := of.RequestWith(rctx, cl)
		if err != nil {
			t.Fatalf("offset fetch: %v", err)
		}
		committed := map[int32]int64{}
		for _, ot := range oresp.Topics {
			for _, op := range ot.Partitions {
				if ot.Topic == "in" && op.Offset > 0 {
					committed[op.Partition] = op.Offset
				}
			}
		}
		var n int64
		for _, rt := range lresp.Topics {
			for _, rp := range rt.Partitions {
				n += rp.Offset - committed[rp.Partition]
			}
		}
		return n
	}
}

func TestSourceNewValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []relaykafka.SourceConfig{
		{Topics: []string{"in"}, Group: "g"},
		{Brokers: []string{"127.0.0.1:1"}, Group: "g"},
		{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"in"}},
		{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"in"}, Group: "g", SessionTimeout: -time.Second},
	} {
		if _, err := relaykafka.NewSource(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relaykafka.ErrInvalidConfig) {
			t.Errorf("NewSource(%+v): %v", cfg, err)
		}
	}
}

const envSourceBrokers = "MQLITE_KAFKA_SOURCE_BROKERS"

// sourcePartitions is the partitions of the crash test's topic.
const sourcePartitions = 4

// TestSourceCrashWorker is the intake process of TestSourceCrash.
func TestSourceCrashWorker(t *testing.T) {
	ok := relaytest.SourceWorker(t, func(t *testing.T) relay.Source {
		// One instance id for every worker: a new one takes the killed
		// one's place in the group at once, instead of after the session
		// timeout.
		return newSource(t, strings.Split(os.Getenv(envSourceBrokers), ","), kgo.InstanceID("worker"))
	})
	if !ok {
		t.Skip("runs only as the source crash harness's worker process")
	}
}

// TestSourceCrash takes sourceCrashN records of a kfake topic of four
// partitions into a queue through intake processes that are SIGKILLed
// between a commit and the offsets' commit, and at random: every record
// ends in the queue exactly once. The control commits the offsets before
// the queue's commit, and loses the batches its kills fall between the
// two.
func TestSourceCrash(t *testing.T) {
	t.Parallel()
	relaytest.SourceCrashTest(t, sourceCrashN, sourceCrashKills, func(t *testing.T, n int) relaytest.SourceCrash {
		c := fake(t, kfake.NumBrokers(3), kfake.SeedTopics(sourcePartitions, "in"))
		ids := make([]string, n)
		recs := make([]*kgo.Record, n)
		for i := range recs {
			ids[i] = fmt.Sprintf("msg-%d", i)
			recs[i] = &kgo.Record{Key: []byte(fmt.Sprint(i % 16)), Value: []byte(ids[i]),
				Headers: []kgo.RecordHeader{{Key: relaykafka.HeaderID, Value: []byte(ids[i])}}}
		}
		produce(t, c.ListenAddrs(), recs...)
		return relaytest.SourceCrash{Worker: "TestSourceCrashWorker", Env: []string{envSourceBrokers + "=" + strings.Join(c.ListenAddrs(), ",")},
			Bodies: ids, Unacked: unacked(t, c.ListenAddrs(), sourcePartitions)}
	})
}

// TestSourceHoldsAMissingTopic: a topic that does not exist holds the
// intake, logged once; once it exists its records come.
func TestSourceHoldsAMissingTopic(t *testing.T) {
	t.Parallel()
	c := fake(t)
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	logs := &relaytest.Logs{}
	relaytest.Intake(t, b.Store, newSource(t, c.ListenAddrs()), relay.IntakeConfig{
		Logger: logs.Logger(), HoldBackoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
	})
	relaytest.Poll(t, "the hold to be logged", func() bool { return len(logs.Messages()) > 0 })
	createTopic(t, c.ListenAddrs(), "in")
	produce(t, c.ListenAddrs(), &kgo.Record{Value: []byte("a")})
	relaytest.PollGrowth(t, "the record", func() int64 { return relaytest.Total(t, b.Store) }, 1)
	if msgs := logs.Messages(); len(msgs) != 1 || !strings.Contains(msgs[0], "intake: holding") {
		t.Errorf("logs: %q, want the hold once", msgs)
	}
}

// TestSourceBrokerLoss takes sourceCrashN records of a topic of four
// partitions on a kfake cluster of three brokers and, a third of the way
// in, removes the broker that coordinates the group (its listener closed,
// its partitions led by the others): the intake goes on, and every record
// ends in the queue exactly once, the group committed past them all. The
// control gives the records read after the loss new ids: what the group
// reads again is then in the queue twice, so the check can fail.
func TestSourceBrokerLoss(t *testing.T) {
	t.Parallel()
	for _, control := range []bool{false, true} {
		t.Run(map[bool]string{false: "ids kept", true: "control: new ids after the loss"}[control], func(t *testing.T) {
			t.Parallel()
			sourceBrokerLoss(t, control)
		})
	}
}

// renaming suffixes the id of each record it reads once on is set.
type renaming struct {
	relay.Source
	on atomic.Bool
}

func (r *renaming) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	msgs, err := r.Source.Fetch(ctx, max)
	if r.on.Load() {
		for i := range msgs {
			msgs[i].MessageID += "#after"
		}
	}
	return msgs, err
}

func sourceBrokerLoss(t *testing.T, control bool) {
	const partitions = 4
	c := fake(t, kfake.NumBrokers(3), kfake.SeedTopics(partitions, "in"))
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	n := sourceCrashN
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("rec-%d", i)
		recs[i] = &kgo.Record{Key: []byte(id), Value: []byte(id), Headers: []kgo.RecordHeader{{Key: relaykafka.HeaderID, Value: []byte(id)}}}
	}
	produce(t, c.ListenAddrs(), recs...)
	obs := &takenCount{}
	src := &renaming{Source: newSource(t, c.ListenAddrs())}
	relaytest.Intake(t, b.Store, src, relay.IntakeConfig{Observer: obs})
	relaytest.PollGrowth(t, "a third of the records", func() int64 { return relaytest.Total(t, b.Store) }, int64(n/3))
	victim := c.CoordinatorFor(sourceGroup)
	led := 0
	for p := range int32(partitions) {
		if c.LeaderFor("in", p) == victim {
			led++
		}
	}
	at := relaytest.Total(t, b.Store)
	src.on.Store(control)
	if err := c.RemoveNode(victim); err != nil {
		t.Fatal(err)
	}
	u := unacked(t, c.ListenAddrs(), partitions)
	relaytest.PollGrowth(t, "every record", func() int64 { return relaytest.Total(t, b.Store) }, int64(n))
	relaytest.Poll(t, "the group to commit every record", func() bool { return u() == 0 })
	rows := testdb.Strings(t, b.Store.DB(), "SELECT CAST(body AS TEXT) FROM mqlite_messages WHERE queue = ?", relaytest.Queue)
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r] = true
	}
	taken, dups := obs.counts()
	switch {
	case len(seen) != n:
		t.Fatalf("%d distinct records of %d in the queue", len(seen), n)
	case control && len(rows) == n:
		t.Fatalf("new ids after the loss took nothing twice (%d rows, %d deliveries): the check cannot fail", len(rows), taken)
	case control:
		t.Logf("control: %d rows for %d records", len(rows), n)
		return
	case len(rows) != n:
		t.Fatalf("%d rows, want %d each once", len(rows), n)
	}
	t.Logf("%d records; broker %d (the group's coordinator, leading %d of %d partitions) removed after %d: %d rows, each once; %d deliveries, %d again (dropped by the dedup window)",
		n, victim, led, partitions, at, len(rows), taken, dups)
}

// takenCount counts an intake's deliveries and the duplicates among them.
type takenCount struct {
	mu          sync.Mutex
	taken, dups int
}

func (o *takenCount) Taken(_ string, _ relay.Inbound, dup bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.taken++
	if dup {
		o.dups++
	}
}

func (o *takenCount) Held(string, string, error) {}

func (o *takenCount) counts() (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.taken, o.dups
}
