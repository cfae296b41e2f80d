package nats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

// sourceAckWait is the tests' AckWait: short, so that a message a killed
// intake left unacknowledged comes again soon.
const sourceAckWait = time.Second

func newSource(t testing.TB, js jetstream.JetStream, stream string) *relaynats.Source {
	t.Helper()
	src, err := relaynats.NewSource(relaynats.SourceConfig{JetStream: js, Stream: stream, Consumer: "intake", AckWait: sourceAckWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

func publish(t testing.TB, js jetstream.JetStream, m *natsgo.Msg) {
	t.Helper()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// intakeRows returns the message id, subject, group and properties of
// every message in the queue, in order.
func intakeRows(t testing.TB, st *mqlite.Store) []string {
	return testdb.Strings(t, st.DB(), "SELECT message_id || ' ' || subject || ' ' || coalesce(group_id, '-') || ' ' || coalesce(properties, '-') FROM mqlite_messages ORDER BY id")
}

func TestSourceTakesEachMessageOnceByID(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	stream(t, js, "IN")
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	m := natsgo.NewMsg("IN.created")
	m.Data = []byte("a")
	m.Header.Set(jetstream.MsgIDHeader, "order-1")
	m.Header.Set(relay.HeaderGroupID, "customer-7")
	m.Header.Set("tenant", "acme")
	publish(t, js, m)
	publish(t, js, &natsgo.Msg{Subject: "IN.paid", Data: []byte("b")}) // no id: the stream sequence
	relaytest.Intake(t, b.Store, newSource(t, js, "IN"), relay.IntakeConfig{})
	relaytest.PollGrowth(t, "the queue to fill", func() int64 { return relaytest.Total(t, b.Store) }, 2)
	want := []string{`order-1 IN.created customer-7 {"tenant":"acme"}`, "IN:2 IN.paid - -"}
	if got := intakeRows(t, b.Store); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("queue rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	relaytest.Poll(t, "the consumer to have every message acknowledged", func() bool { return unacked(t, js, "IN")() == 0 })
}

// TestSourceHoldsAsidePoisonedMessages: five messages the queue refuses
// (a Nats-Msg-Id too long, one not UTF-8, a header not UTF-8, a subject
// over the limit, a group id too long; the server itself bounds headers) among good ones: every good one is
// taken, each poisoned one is held aside in the hold queue, and the
// consumer has nothing pending or unacknowledged.
func TestSourceHoldsAsidePoisonedMessages(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	stream(t, js, "IN")
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	poison := []natsgo.Header{
		{jetstream.MsgIDHeader: {relaytest.LongID}},
		{jetstream.MsgIDHeader: {"bad-\xff"}},
		{jetstream.MsgIDHeader: {"p3"}, "Tenant": {"\xfe"}},
		{jetstream.MsgIDHeader: {"p4"}},
		{jetstream.MsgIDHeader: {"p5"}, relay.HeaderGroupID: {strings.Repeat("g", mqlite.MaxGroupIDLen+1)}},
	}
	good := func(i int) *natsgo.Msg {
		m := &natsgo.Msg{Subject: "IN.good", Data: []byte(relaytest.Good(i)), Header: natsgo.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, relaytest.Good(i))
		return m
	}
	for i, h := range poison {
		publish(t, js, good(i))
		subject := "IN.poison"
		if i == 3 {
			subject = "IN." + strings.Repeat("s", mqlite.MaxSubjectLen)
		}
		publish(t, js, &natsgo.Msg{Subject: subject, Data: []byte(fmt.Sprintf("poison-%d", i)), Header: h})
	}
	publish(t, js, good(len(poison)))
	reasons := []string{relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid}
	relaytest.CheckPoisoned(t, b.Store, newSource(t, js, "IN"), reasons, unacked(t, js, "IN"))
}

// unacked returns a func that counts the messages of the intake consumer
// of stream that are not acknowledged.
func unacked(t testing.TB, js jetstream.JetStream, stream string) func() int64 {
	return func() int64 {
		c, err := js.Consumer(ctx, stream, "intake")
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 1 << 40 // not created yet: nothing acknowledged
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int64(info.NumPending) + int64(info.NumAckPending)
	}
}

// TestSourceHoldsAMissingStream: a stream not created yet, then deleted
// under the intake, holds it (logged once each time); once the stream is
// there the messages come.
func TestSourceHoldsAMissingStream(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
	logs := &relaytest.Logs{}
	relaytest.Intake(t, b.Store, newSource(t, js, "IN"), relay.IntakeConfig{
		Logger: logs.Logger(), HoldBackoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
	})
	relaytest.Poll(t, "the hold to be logged", func() bool { return len(logs.Messages()) > 0 })
	stream(t, js, "IN")
	publish(t, js, &natsgo.Msg{Subject: "IN.a", Data: []byte("a")})
	relaytest.PollGrowth(t, "the first message", func() int64 { return relaytest.Total(t, b.Store) }, 1)
	if err := js.DeleteStream(ctx, "IN"); err != nil {
		t.Fatal(err)
	}
	stream(t, js, "IN")
	m := natsgo.NewMsg("IN.b")
	m.Header.Set(jetstream.MsgIDHeader, "b") // the new stream's sequences start again at 1
	publish(t, js, m)
	relaytest.PollGrowth(t, "the message of the new stream", func() int64 { return relaytest.Total(t, b.Store) }, 2)
	holds := 0
	for _, l := range logs.Messages() {
		if strings.Contains(l, "intake: holding") {
			holds++
		}
	}
	if holds < 1 || holds > 2 {
		t.Errorf("holds logged %d times, want once per outage: %q", holds, logs.Messages())
	}
}

func TestSourceRefusesAConsumerThatDrops(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	s := stream(t, js, "IN")
	for _, tc := range []struct {
		name string
		cc   jetstream.ConsumerConfig
	}{
		{"max deliver", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5}},
		{"ack none", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}},
		{"ack wait over the source's", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			tc.cc.Durable = name
			if _, err := s.CreateConsumer(ctx, tc.cc); err != nil {
				t.Fatal(err)
			}
			b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: relaytest.CrashWindow})
			src, err := relaynats.NewSource(relaynats.SourceConfig{JetStream: js, Stream: "IN", Consumer: name})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			in, err := relay.NewIntake(b.Store, relaytest.Queue, src, relay.IntakeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, relaytest.Timeout)
			defer cancel()
			if err := in.Run(rctx); !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("Run: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestNewSourceValidates(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	for _, cfg := range []relaynats.SourceConfig{
		{Stream: "S", Consumer: "c"},
		{JetStream: js, Consumer: "c"},
		{JetStream: js, Stream: "S"},
		{JetStream: js, Stream: "S", Consumer: "c", AckWait: -time.Second},
	} {
		if _, err := relaynats.NewSource(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relaynats.ErrInvalidConfig) {
			t.Errorf("NewSource(%+v): %v", cfg, err)
		}
	}
}

const envSourceURL = "MQLITE_NATS_SOURCE_URL"

// TestSourceCrashWorker is the intake process of TestSourceCrash.
func TestSourceCrashWorker(t *testing.T) {
	ok := relaytest.SourceWorker(t, func(t *testing.T) relay.Source {
		nc, err := natsgo.Connect(os.Getenv(envSourceURL), natsgo.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return newSource(t, js, "IN")
	})
	if !ok {
		t.Skip("runs only as the source crash harness's worker process")
	}
}

// TestSourceCrash takes sourceCrashN messages of a JetStream stream into a
// queue through intake processes that are SIGKILLed between a commit and
// its acknowledgement, and at random: every message ends in the queue
// exactly once. The control acknowledges before the commit, and loses the
// batches its kills fall between the two.
func TestSourceCrash(t *testing.T) {
	t.Parallel()
	relaytest.SourceCrashTest(t, sourceCrashN, sourceCrashKills, func(t *testing.T, n int) relaytest.SourceCrash {
		srv := embedded(t, t.TempDir(), 0)
		js := connect(t, srv.ClientURL())
		stream(t, js, "IN")
		bodies := make([]string, n)
		for i := range bodies {
			bodies[i] = fmt.Sprintf("msg-%d", i)
			m := natsgo.NewMsg("IN.e")
			m.Data = []byte(bodies[i])
			if i%2 == 0 { // half by Nats-Msg-Id, half by stream sequence
				m.Header.Set(jetstream.MsgIDHeader, bodies[i])
			}
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(relaytest.Timeout):
			t.Fatal("publishes not acknowledged")
		}
		return relaytest.SourceCrash{Worker: "TestSourceCrashWorker", Env: []string{envSourceURL + "=" + srv.ClientURL()},
			Bodies: bodies, Unacked: unacked(t, js, "IN")}
	})
}
