package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
)

// The relay crash test against Kafka: a relay process (this test binary,
// re-executed as TestRelayCrashWorker) forwards a queue into a kfake
// cluster of three brokers that runs in the harness, which SIGKILLs it
// mid-stream and starts it again on the same file (whose Open releases
// the dead process's leases at once). Each relay process also
// loses the brokers' answers to its first produce requests (lossyConn), so
// that its producer sends those batches again.

const (
	envCrashDB         = "MQLITE_KAFKA_CRASH_DB" // the store's path; set only in the worker
	envCrashBrokers    = "MQLITE_KAFKA_CRASH_BROKERS"
	envCrashIdempotent = "MQLITE_KAFKA_CRASH_IDEMPOTENT" // "0": the idempotent producer off (the control)
	crashLostAnswers   = 3                               // produce answers each relay process loses
	crashGroups        = 200
	crashPartitions    = 4
)

func openCrashStore(path string) (*mqlite.Store, error) {
	return mqlite.Open(context.Background(), path, mqlite.Config{ReaperInterval: 50 * time.Millisecond})
}

// TestRelayCrashWorker is the relay process; it does nothing unless the
// harness started it. It exits once the queue is empty.
func TestRelayCrashWorker(t *testing.T) {
	path := os.Getenv(envCrashDB)
	if path == "" {
		t.Skip("runs only as the Kafka crash harness's worker process")
	}
	st, err := openCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drop := &atomic.Int32{}
	drop.Store(crashLostAnswers)
	opts := []kgo.Opt{lossyDialer(drop, &atomic.Int32{})}
	if os.Getenv(envCrashIdempotent) == "0" {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	s, err := relaykafka.New(relaykafka.Config{
		Brokers: strings.Split(os.Getenv(envCrashBrokers), ","), Options: opts,
		DeliveryTimeout: 10 * time.Minute, // no record times out on a busy machine: each copy is a kill's or a lost answer's
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relaytest.RunUntilEmpty(t, st, s, relay.Config{
		Concurrency: 8, Backoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
}

// TestRelayCrashDuplicates relays crashN messages in crashGroups groups
// into a kfake cluster of three brokers and SIGKILLs the relay process
// crashKills times on the way. Every message reaches the topic; copies
// come only from the relay sending again what a killed process had
// produced but not completed, each under a new delivery (a higher
// Mqlite-Delivery-Count), never from a producer's resend of a batch whose
// answer was lost (the same id and delivery twice), which the idempotent
// producer drops; a consumer that drops the ids it has seen reads each
// message once, each group's in send order. The control turns the
// idempotent producer off: the lost answers then leave copies of the same
// delivery, and the check says so. It is not parallel with the package's
// other tests: its relay processes load the machine (its two cases run
// side by side).
func TestRelayCrashDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name       string
		idempotent bool
		n, kills   int
	}{
		{"idempotent", true, crashN, crashKills},
		{"control: idempotent producer off", false, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fake(t, kfake.NumBrokers(3), kfake.SeedTopics(crashPartitions, "events"))
			path := filepath.Join(t.TempDir(), "relay.db")
			st, err := openCrashStore(path)
			if err != nil {
				t.Fatal(err)
			}
			err = st.CreateQueue(ctx, relaytest.Queue, mqlite.QueueOptions{MaxDeliveryCount: mqlite.MaxDeliveryLimit, LockDuration: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			relaytest.Send(t, st, grouped(tc.n, 64, crashGroups)...)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			env := []string{envCrashDB + "=" + path, envCrashBrokers + "=" + strings.Join(c.ListenAddrs(), ","),
				envCrashIdempotent + "=" + map[bool]string{true: "1", false: "0"}[tc.idempotent]}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for k := 1; k <= tc.kills; k++ {
				cmd := relaytest.StartWorker(t, "TestRelayCrashWorker", env...)
				want := int64(k * tc.n / (tc.kills + 1))
				relaytest.PollGrowth(t, "the topic to grow", func() int64 { return records(t, cl) }, want)
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait() // killed: the error says so
			}
			if err := relaytest.StartWorker(t, "TestRelayCrashWorker", env...).Wait(); err != nil { // exits once the queue is empty
				t.Fatalf("last worker: %v", err)
			}
			if st, err = openCrashStore(path); err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			relaytest.Empty(t, st)

			recs := readAll(t, c.ListenAddrs(), "events", int(records(t, cl)))
			copies := dedupe(t, recs, tc.n)
			again, err := producerCopies(recs)
			if !tc.idempotent {
				if !errors.Is(err, errProducerCopy) {
					t.Fatalf("the idempotent producer off left no copy of a delivery (%d records); the check cannot fail", len(recs))
				}
				t.Logf("control: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			twice, most := 0, 0
			for _, k := range copies {
				if k > 1 {
					twice++
				}
				most = max(most, k)
			}
			t.Logf("%d messages, %d SIGKILLs of the relay, %d produce answers lost: %d records, %d copies (each a later delivery of its message) of %d messages, at most %d records of one; none of one delivery",
				tc.n, tc.kills, crashLostAnswers*(tc.kills+1), len(recs), again, twice, most)
		})
	}
}

// records returns how many records the topic "events" holds: the sum of
// its partitions' high watermarks (the idempotent producer writes no
// control records).
func records(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "events"
	for p := range int32(crashPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	rctx, cancel := context.WithTimeout(ctx, relaytest.Timeout)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	var n int64
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("list offsets of partition %d: error code %d", rp.Partition, rp.ErrorCode)
			}
			n += rp.Offset
		}
	}
	return n
}

// errProducerCopy is producerCopies' finding: a record written twice by
// one delivery, a copy the idempotent producer exists to drop.
var errProducerCopy = errors.New("a delivery's record stored twice")

// producerCopies checks that no two records carry the same HeaderID and
// delivery count: the relay sends a message again only under a new
// delivery, so such a pair is a producer's resend that the broker kept.
// It returns how many copies of a message are later deliveries.
func producerCopies(recs []*kgo.Record) (int, error) {
	seen := map[string]bool{}
	ids := map[string]bool{}
	again := 0
	for _, r := range recs {
		id, d := header(r, relaykafka.HeaderID), header(r, relay.HeaderDeliveryCount)
		if seen[id+"\x00"+d] {
			return again, fmt.Errorf("%w: %s, delivery %s, at partition %d offset %d", errProducerCopy, id, d, r.Partition, r.Offset)
		}
		seen[id+"\x00"+d] = true
		if ids[id] {
			again++
		}
		ids[id] = true
	}
	return again, nil
}

// dedupe reads recs as a consumer that drops the ids it has seen does, and
// fails the test unless it reads each of the n messages "msg-0" to
// "msg-<n-1>", every copy of one with the same key on the same partition,
// and each group's (key's) first copies in send order. It returns how many
// records each id has.
func dedupe(t *testing.T, recs []*kgo.Record, n int) map[string]int {
	t.Helper()
	copies := map[string]int{}
	key := map[string]string{}
	partition := map[string]int32{}
	last := map[string]int{} // group → index of the last message the consumer kept
	for _, r := range recs {
		id := header(r, relaykafka.HeaderID)
		copies[id]++
		if k, ok := key[id]; ok && (k != string(r.Key) || partition[id] != r.Partition) {
			t.Errorf("%s: copies with keys %q and %q on partitions %d and %d", id, k, r.Key, partition[id], r.Partition)
		}
		key[id], partition[id] = string(r.Key), r.Partition
		if copies[id] > 1 {
			continue // the consumer drops an id it has seen
		}
		g := string(r.Key)
		i, _ := strconv.Atoi(id[len("msg-"):])
		if prev, ok := last[g]; ok && i < prev {
			t.Errorf("group %s: msg-%d after msg-%d", g, i, prev)
		}
		last[g] = i
	}
	for i := range n {
		if copies[fmt.Sprintf("msg-%d", i)] == 0 {
			t.Fatalf("msg-%d lost", i)
		}
	}
	if len(copies) != n {
		t.Fatalf("%d distinct ids, want %d", len(copies), n)
	}
	return copies
}
