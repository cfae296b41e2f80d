package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

var ctx = context.Background()

// ackTimeout is the tests' wait for a PubAck: short, so that a publish lost
// to a server restart is retried soon.
const ackTimeout = 2 * time.Second

// embedded starts a JetStream server on 127.0.0.1 with its store in dir.
// port 0 picks a free port; a restart passes the first server's port, so
// that clients reconnect to it. The test's cleanup shuts it down.
func embedded(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready")
	}
	t.Cleanup(func() { shutdown(s) })
	return s
}

func shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// connect returns a JetStream on url, on a connection that reconnects for
// ever, closed by the test's cleanup.
func connect(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(ackTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// stream creates a file stream name over subjects "<name>.>" with a
// duplicate window of 10 minutes.
func stream(t testing.TB, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ids returns the Nats-Msg-Id of every message in s, counting each.
func ids(t testing.TB, s jetstream.Stream) map[string]int {
	t.Helper()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		got[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return got
}

// startRelay runs a relay from the test store to JetStream with cfg.
func startRelay(t testing.TB, b *testdb.Bundle, cfg relaynats.Config, opts relay.Config) *relaytest.Observer {
	t.Helper()
	sink, err := relaynats.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Backoff = consumer.Backoff{Initial: -1} // the fake clock never ends a backoff
	return relaytest.Relay(t, b.Store, sink, opts)
}

// traceparent is a valid W3C Trace Context parent.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestPublishesWithIDHeadersAndSubject(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	s := stream(t, js, "EV")
	b := relaytest.Open(t, mqlite.QueueOptions{})
	seqs := relaytest.Send(t, b.Store,
		outbox.Message{Body: []byte("a"), Subject: "created", Properties: map[string]string{"tenant": "acme", "Nats-Msg-Id": "forged", "traceparent": "malformed"}},
		outbox.Message{Body: []byte("b"), Subject: "paid", MessageID: "order-9", GroupID: "customer-1", Properties: map[string]string{"traceparent": traceparent}},
		outbox.Message{Body: []byte("c")}) // no subject: "EV." is no subject
	obs := startRelay(t, b, relaynats.Config{JetStream: js, Subject: "EV.{{.Subject}}", AckTimeout: ackTimeout}, relay.Config{})
	obs.WaitFor(t, "two deliveries and a hold", func(c relaytest.Counts) bool { return c.Completed == 2 && c.Held >= 1 })

	// Different groups go out concurrently: find each by its id.
	byID := map[string]*jetstream.RawStreamMsg{}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		byID[m.Header.Get(jetstream.MsgIDHeader)] = m
	}
	for i, want := range []struct{ id, subject string }{
		{fmt.Sprintf("%s:%d", relaytest.Queue, seqs[0]), "EV.created"},
		{"order-9", "EV.paid"},
	} {
		m := byID[want.id]
		if m == nil || m.Subject != want.subject || m.Header.Get(relay.HeaderSeq) != strconv.FormatInt(seqs[i], 10) ||
			m.Header.Get(relay.HeaderDeliveryCount) != "1" {
			t.Fatalf("message %s: %+v", want.id, m)
		}
	}
	if h := byID[fmt.Sprintf("%s:%d", relaytest.Queue, seqs[0])].Header; h.Get("tenant") != "acme" || h.Get("traceparent") != "" {
		t.Fatalf("properties not carried, or a malformed traceparent passed on: %v", h)
	}
	// The trace context travels as W3C Trace Context headers, names in
	// lower case as the W3C spells them (NATS headers are case-sensitive).
	if h := byID["order-9"].Header; h.Get("traceparent") != traceparent {
		t.Fatalf("traceparent not passed on: %v", h)
	}
	dead, err := b.Store.PeekDeadLetters(ctx, relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	// The subject template's fault is the operator's: the message is held
	// (locked, on its first delivery), never dead-lettered.
	if len(dead) != 0 {
		t.Fatalf("dead letters %+v, want the message without a subject held", dead)
	}
	held, err := b.Store.Peek(ctx, relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Seq != seqs[2] || held[0].State != mqlite.StateLocked || held[0].DeliveryCount != 1 {
		t.Fatalf("queue holds %+v, want the message without a subject locked on its first delivery", held)
	}
	if c := obs.Counts(); c.Rejected != 0 || c.Abandoned != 0 {
		t.Fatalf("counts %+v: the held message was abandoned or dead-lettered", c)
	}
}

func TestResendIsDroppedByTheStream(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	s := stream(t, js, "EV")
	sink, err := relaynats.New(relaynats.Config{JetStream: js, Subject: "EV.x"})
	if err != nil {
		t.Fatal(err)
	}
	m := mqlite.Message{Queue: "q", Seq: 7, Body: []byte("once"), DeliveryCount: 1}
	for range 3 { // three deliveries of one message: a lost ack, a crash
		if out := sink.Send(ctx, []mqlite.Message{m}); !out[0].Delivered() {
			t.Fatalf("send: %v", out[0].Err)
		}
		m.DeliveryCount++
	}
	if got := ids(t, s); len(got) != 1 || got["q:7"] != 1 {
		t.Fatalf("stream holds %v, want q:7 once", got)
	}
}

func TestServerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	const n = 5000
	dir := t.TempDir()
	srv := embedded(t, dir, 0)
	port := srv.Addr().(*net.TCPAddr).Port
	js := connect(t, srv.ClientURL())
	s := stream(t, js, "EV")
	// A wall clock: on a busy machine a settlement can pass its timeout,
	// and only a lease that ends lets that message go out again.
	st := relaytest.OpenWallClock(t)
	relaytest.Send(t, st, relaytest.Bodies(n, 64, false)...)
	sink, err := relaynats.New(relaynats.Config{JetStream: js, Subject: "EV.x", AckTimeout: ackTimeout})
	if err != nil {
		t.Fatal(err)
	}
	obs := relaytest.Relay(t, st, sink, relay.Config{Concurrency: 8, Backoff: consumer.Backoff{Initial: -1}})

	// Mid-stream the server goes down and comes back on the same store
	// dir and port; publishes in flight get no PubAck and are retried.
	obs.WaitFor(t, "the first thousand", func(c relaytest.Counts) bool { return c.Completed >= 1000 })
	shutdown(srv)
	embedded(t, dir, port)
	relaytest.WaitEmpty(t, st, obs)
	c := obs.Counts()
	got := ids(t, s)
	if len(got) != n {
		t.Fatalf("stream holds %d distinct ids, want %d", len(got), n)
	}
	for id, k := range got {
		if k != 1 {
			t.Fatalf("id %s stored %d times", id, k)
		}
	}
	t.Logf("%d messages, %d retried after the restart, each stored once", n, c.Abandoned)
}

// TestNoStreamHoldsTheMessages: a relay pointed at a server with no stream
// for its subject says so once and keeps the messages (no delivery
// counted, nothing dead-lettered, on a queue that dead-letters at the
// second delivery); once the stream exists, every message goes out.
func TestNoStreamHoldsTheMessages(t *testing.T) {
	t.Parallel()
	const n = 200
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	b := relaytest.Open(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 64, false)...)
	logs := &relaytest.Logs{}
	sink, err := relaynats.New(relaynats.Config{JetStream: js, Subject: "EV.x", AckTimeout: ackTimeout})
	if err != nil {
		t.Fatal(err)
	}
	spy := relaytest.HoldSpy{Sink: sink, Held: make(chan error, 1)}
	obs := relaytest.Relay(t, b.Store, spy, relay.Config{
		Logger: logs.Logger(), HoldBackoff: consumer.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond},
	})
	relaytest.WaitHolds(t, spy, 3, relaynats.ErrNoStream) // three rounds of holds with no stream
	s := stream(t, js, "EV")
	c := obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	if c.Abandoned != 0 || c.Rejected != 0 {
		t.Fatalf("counts %+v: held messages were abandoned or dead-lettered", c)
	}
	relaytest.Empty(t, b.Store)
	if got := ids(t, s); len(got) != n {
		t.Fatalf("stream holds %d ids, want %d", len(got), n)
	}
	if got := logs.Messages(); len(got) != 1 {
		t.Fatalf("logs %q, want the hold said once", got)
	}
}

func TestStandaloneServer(t *testing.T) {
	t.Parallel()
	addr := relaytest.Service(t, "nats-server", "127.0.0.1:4222")
	js := connect(t, "nats://"+addr)
	name := fmt.Sprintf("MQLITE_TEST_%d", time.Now().UnixNano())
	s := stream(t, js, name)
	t.Cleanup(func() { _ = js.DeleteStream(ctx, name) })
	const n = 1000
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, relaytest.Bodies(n, 256, true)...)
	obs := startRelay(t, b, relaynats.Config{JetStream: js, Subject: name + ".{{.Queue}}", AckTimeout: ackTimeout}, relay.Config{})
	obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == n })
	relaytest.Empty(t, b.Store)
	if got := ids(t, s); len(got) != n {
		t.Fatalf("stream holds %d distinct ids, want %d", len(got), n)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	srv := embedded(t, t.TempDir(), 0)
	js := connect(t, srv.ClientURL())
	for name, cfg := range map[string]relaynats.Config{
		"no JetStream":         {},
		"bad template":         {JetStream: js, Subject: "{{.Queue"},
		"negative in flight":   {JetStream: js, MaxInFlight: -1},
		"negative ack timeout": {JetStream: js, AckTimeout: -time.Second},
	} {
		if _, err := relaynats.New(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, relaynats.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}
