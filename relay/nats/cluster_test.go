package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

// A JetStream cluster of three nodes on loopback, each with its own store
// dir, client port and route port, all known before the first starts, so
// that a node shut down comes back on the same ports and store.
type cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	name        string
	dir         string
	port, route int
	srv         *server.Server // nil while down
}

// freePorts returns n ports that were free a moment ago on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	ls := make([]net.Listener, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i], ports[i] = l, l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// newCluster starts three nodes and waits until JetStream has a meta
// leader. The test's cleanup shuts them down.
func newCluster(t testing.TB) *cluster {
	t.Helper()
	ports := freePorts(t, 6)
	c := &cluster{t: t}
	for i := range 3 {
		c.nodes = append(c.nodes, &node{
			name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(t.TempDir(), fmt.Sprint(i)),
			port: ports[2*i], route: ports[2*i+1],
		})
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	c.waitFor("a meta leader", func() bool { return c.metaLeader() != nil })
	return c
}

// start starts n on its ports and store.
func (c *cluster) start(n *node) {
	c.t.Helper()
	routes := make([]string, 0, 2)
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.route))
		}
	}
	s, err := server.NewServer(&server.Options{
		ServerName: n.name, Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir,
		NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "mqlite-test", Host: "127.0.0.1", Port: n.route},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("node %s not ready", n.name)
	}
	c.mu.Lock()
	n.srv = s
	c.mu.Unlock()
}

// stop shuts n down, if it is up.
func (c *cluster) stop(n *node) {
	c.mu.Lock()
	s := n.srv
	n.srv = nil
	c.mu.Unlock()
	if s != nil {
		shutdown(s)
	}
}

// urls lists every node's client URL, for a connection that fails over.
func (c *cluster) urls() string {
	us := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		us[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	}
	return strings.Join(us, ",")
}

// metaLeader returns the node that leads the JetStream meta group, or nil.
func (c *cluster) metaLeader() *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.srv != nil && n.srv.JetStreamIsLeader() {
			return n
		}
	}
	return nil
}

// byName returns the node called name, or nil.
func (c *cluster) byName(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitFor polls cond every 10ms until it holds, failing the test after
// relaytest.Timeout. The cluster's state changes by itself (elections),
// with nothing to wait on but its answers.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// streamLeader returns the name of the stream's leader, "" when it has
// none or cannot be asked.
func streamLeader(js jetstream.JetStream, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// clusterStream creates an R3 file stream over "<name>.>" with a duplicate
// window of 10 minutes (above the relay's longest retry in these tests)
// and waits until it has a leader and both followers are current.
func clusterStream(t testing.TB, c *cluster, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	var s jetstream.Stream
	var err error
	// Until the meta leader knows the three peers, placement fails ("no
	// suitable peers"); the same config again is no error once it exists.
	c.waitFor("the stream created", func() bool {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
			Replicas: 3, Duplicates: 10 * time.Minute,
		})
		return err == nil
	})
	c.waitFor("a stream leader with two current replicas", func() bool { return current(js, name) })
	return s
}

// current reports whether the stream has a leader and two current
// replicas.
func current(js jetstream.JetStream, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return false
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
		return false
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current {
			return false
		}
	}
	return true
}

// connectCluster returns a JetStream on a connection to every node that
// reconnects for ever, closed by the test's cleanup: to first, when not
// nil, else to a node picked at random.
func connectCluster(t testing.TB, c *cluster, first *node) jetstream.JetStream {
	t.Helper()
	urls, opts := c.urls(), []natsgo.Option{natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20 * time.Millisecond)}
	if first != nil {
		urls = fmt.Sprintf("nats://127.0.0.1:%d,%s", first.port, urls)
		opts = append(opts, natsgo.DontRandomize())
	}
	nc, err := natsgo.Connect(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(clusterAckTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// clusterAckTimeout is the PubAck wait of the cluster tests: the default,
// since three servers, the relay and the store share the test's process
// (and the race detector); a shorter one turns a busy moment into a storm
// of retries.
const clusterAckTimeout = relaynats.DefaultAckTimeout

// streamIDs reads the whole stream with an ordered consumer and counts
// each Nats-Msg-Id; it returns the counts and the number of messages.
// untilResponders calls f until it returns without error, as long as the
// error is that no server answered, failing the test after
// relaytest.Timeout or on any other error.
func untilResponders[T any](t testing.TB, what string, f func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	for {
		v, err := f()
		if err == nil {
			return v
		}
		if !noResponders(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		<-time.After(50 * time.Millisecond) // a poll of the condition
	}
}

// noResponders reports whether err says that no server answered a
// request: the stream's group has no leader for a moment.
func noResponders(err error) bool {
	return errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func streamIDs(t testing.TB, s jetstream.Stream) (map[string]int, int) {
	t.Helper()
	// Right after a node came back, a request can find no responder for a
	// moment (the stream's group is still catching up): ask again.
	info := untilResponders(t, "stream info", func() (*jetstream.StreamInfo, error) { return s.Info(ctx) })
	cons := untilResponders(t, "ordered consumer", func() (jetstream.Consumer, error) {
		return s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	})
	// The ordered consumer (re)creates its server-side consumer as it
	// fetches, and after SIGKILLs on a busy machine the group may be
	// electing a leader then: a fetch that found no responder is asked
	// again; the consumer goes on from the last message it handed over.
	deadline := time.Now().Add(relaytest.Timeout)
	got, total := map[string]int{}, 0
	for total < int(info.State.Msgs) {
		batch := untilResponders(t, "fetch", func() (jetstream.MessageBatch, error) {
			return cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		})
		k := 0
		for m := range batch.Messages() {
			got[m.Headers().Get(jetstream.MsgIDHeader)]++
			k++
		}
		total += k
		switch err := batch.Error(); {
		case err != nil && (!noResponders(err) || time.Now().After(deadline)):
			t.Fatalf("fetch: %v", err)
		case err == nil && k == 0:
			t.Fatalf("read %d of %d messages, then nothing", total, info.State.Msgs)
		}
	}
	return got, total
}

// exactlyOnce fails the test unless the stream holds n messages, the ids
// "msg-0" to "msg-<n-1>", each once.
func exactlyOnce(t testing.TB, s jetstream.Stream, n int) {
	t.Helper()
	got, total := streamIDs(t, s)
	if total != n || len(got) != n {
		t.Fatalf("stream holds %d messages of %d distinct ids, want %d once each", total, len(got), n)
	}
	for i := range n {
		if k := got[fmt.Sprintf("msg-%d", i)]; k != 1 {
			t.Fatalf("msg-%d stored %d times", i, k)
		}
	}
}

// TestClusterLeaderLoss relays clusterN messages into an R3 stream of a
// three-node cluster while a leader is shut down a quarter of the way in
// (the stream's leader, or the meta leader) and comes back on the same
// ports and store once a new one is elected. The stream ends with every
// message exactly once by Nats-Msg-Id, the queue empty and no dead letter.
// It logs the throughput and the longest stall of completions from the
// shutdown on (the election).
func TestClusterLeaderLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		victim func(c *cluster, js jetstream.JetStream) *node
	}{
		{"stream leader", func(c *cluster, js jetstream.JetStream) *node { return c.byName(streamLeader(js, "EV")) }},
		{"meta leader", func(c *cluster, _ jetstream.JetStream) *node { return c.metaLeader() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			js := connectCluster(t, c, nil)
			s := clusterStream(t, c, js, "EV")
			if tc.name == "meta leader" {
				separateLeaders(t, c, js, "EV")
			}
			st := relaytest.OpenWallClock(t)
			relaytest.Send(t, st, relaytest.Bodies(clusterN, 256, true)...)
			// The relay's connection goes to the victim first, so that the
			// shutdown also cuts the PubAcks in flight: those messages are
			// sent again after AckTimeout and the stream drops the copies.
			victim := tc.victim(c, js)
			if victim == nil {
				t.Fatal("no leader to shut down")
			}
			rjs := connectCluster(t, c, victim)
			start := time.Now()
			sink, err := relaynats.New(relaynats.Config{JetStream: rjs, Subject: "EV.x", AckTimeout: clusterAckTimeout})
			if err != nil {
				t.Fatal(err)
			}
			counted := &countingSink{Sink: sink}
			obs := relaytest.Relay(t, st, counted, relay.Config{
				Concurrency: 8, HoldBackoff: relayHold, Backoff: consumer.Backoff{Initial: -1},
			})
			obs.WaitFor(t, "a quarter", func(c relaytest.Counts) bool { return c.Completed >= clusterN/4 })
			if now := tc.victim(c, js); now != victim {
				t.Logf("the leader moved from %s before the shutdown; shutting %s down", victim.name, victim.name)
			}
			killed := time.Now()
			counted.loseAcks.Store(true)
			c.stop(victim)
			c.waitFor("a new leader", func() bool {
				if tc.name == "meta leader" {
					l := c.metaLeader()
					return l != nil && l != victim
				}
				l := streamLeader(js, "EV")
				return l != "" && l != victim.name
			})
			elected := time.Since(killed)
			c.start(victim) // the same ports and store
			relaytest.WaitEmpty(t, st, obs)
			took := time.Since(start)
			c.waitFor("the stream current on all three", func() bool { return current(js, "EV") })
			exactlyOnce(t, s, clusterN)
			if counted.lost.Load() < lostAcks {
				t.Fatalf("only %d PubAcks lost after the shutdown", counted.lost.Load())
			}
			t.Logf("%d messages into R3 in %v (%.0f msgs/s); %s %s shut down: new leader in %v, longest stall of completions %v; %d messages sent again (same Nats-Msg-Id), each stored once",
				clusterN, took.Round(time.Millisecond), float64(clusterN)/took.Seconds(), tc.name, victim.name,
				elected.Round(time.Millisecond), obs.Stall(killed).Round(time.Millisecond), counted.sent.Load()-clusterN)
		})
	}
}

// countingSink counts the messages handed to a sink, resends included.
// Once loseAcks is set, it reports the first lostAcks messages the sink
// delivered as not delivered, as a PubAck lost with its connection would
// be: the relay sends them again, and the stream, now under its new
// leader, must drop the copies.
type countingSink struct {
	relay.Sink
	sent     atomic.Int64
	loseAcks atomic.Bool
	lost     atomic.Int64
}

// lostAcks is how many PubAcks countingSink loses after the shutdown.
const lostAcks = 200

var errLostAck = errors.New("test: PubAck lost")

func (c *countingSink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	c.sent.Add(int64(len(msgs)))
	out := c.Sink.Send(ctx, msgs)
	if !c.loseAcks.Load() {
		return out
	}
	for i, o := range out {
		if o.Delivered() && c.lost.Add(1) <= lostAcks {
			out[i] = relay.RetryAfter(errLostAck, 0)
		}
	}
	return out
}

// separateLeaders asks the stream's leader to step down until it is not
// the meta leader, so that shutting the meta leader down tests the meta
// group's election alone.
func separateLeaders(t testing.TB, c *cluster, js jetstream.JetStream, name string) {
	t.Helper()
	nc := js.Conn()
	c.waitFor("a stream leader other than the meta leader", func() bool {
		meta, l := c.metaLeader(), streamLeader(js, name)
		if meta == nil || l == "" {
			return false
		}
		if l != meta.name {
			return true
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, nil, 2*time.Second)
		c.waitFor("a stream leader", func() bool { return current(js, name) })
		return false
	})
}

// relayHold is the hold backoff of the cluster tests: an election answers
// "no stream" for a moment, and the relay tries again soon.
var relayHold = consumer.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
