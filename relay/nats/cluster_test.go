package nats_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
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
// dir, client, route and monitoring ports, all known before the first
// starts, so that a node stopped comes back on the same ports and store.
// Its nodes are servers in this process, stopped by a Shutdown, or child
// processes, stopped by SIGKILL (startCluster).
type cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*node
	procs bool // each node a child process
}

type node struct {
	name              string
	dir               string
	port, route, http int
	srv               *server.Server // in this process; nil while down
	proc              *exec.Cmd      // a child process; nil while down
	stdin             io.WriteCloser // of proc: the node stops when it closes
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

// newCluster starts three nodes in this process and waits until JetStream
// has a meta leader. The test's cleanup shuts them down.
func newCluster(t testing.TB) *cluster { return startCluster(t, false) }

// startCluster starts three nodes, each a child process when procs (stop
// SIGKILLs it) or else a server in this process, and waits until
// JetStream has a meta leader. The test's cleanup stops them all.
func startCluster(t testing.TB, procs bool) *cluster {
	t.Helper()
	ports := freePorts(t, 9)
	c := &cluster{t: t, procs: procs}
	for i := range 3 {
		c.nodes = append(c.nodes, &node{
			name: fmt.Sprintf("n%d", i+1), dir: filepath.Join(t.TempDir(), fmt.Sprint(i)),
			port: ports[3*i], route: ports[3*i+1], http: ports[3*i+2],
		})
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	for _, n := range c.nodes {
		c.start(n)
	}
	c.waitFor("a meta leader", func() bool { return c.metaLeader() != nil })
	return c
}

// config returns n's nodeConfig.
func (c *cluster) config(n *node) nodeConfig {
	routes := make([]string, 0, 2)
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.route))
		}
	}
	return nodeConfig{Name: n.name, Dir: n.dir, Port: n.port, Route: n.route, HTTP: n.http, Routes: strings.Join(routes, ",")}
}

// start starts n on its ports and store.
func (c *cluster) start(n *node) {
	c.t.Helper()
	if c.procs {
		c.startProcess(n)
		return
	}
	s, err := server.NewServer(c.config(n).options())
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

// stop shuts n down, if it is up: a Shutdown in this process, a SIGKILL
// of a child process.
func (c *cluster) stop(n *node) {
	c.mu.Lock()
	s, proc, stdin := n.srv, n.proc, n.stdin
	n.srv, n.proc, n.stdin = nil, nil, nil
	c.mu.Unlock()
	if s != nil {
		shutdown(s)
	}
	if proc != nil {
		kill(proc, stdin)
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
		if n.srv != nil && n.srv.JetStreamIsLeader() || n.proc != nil && leadsMeta(n) {
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

// waitFor polls cond until it holds (relaytest.Poll): the cluster's
// state changes by itself (elections), with nothing to wait on but its
// answers.
func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	relaytest.Poll(c.t, what, cond)
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
	return windowStream(t, c, js, name, 10*time.Minute)
}

// windowStream is clusterStream with a duplicate window of window.
func windowStream(t testing.TB, c *cluster, js jetstream.JetStream, name string, window time.Duration) jetstream.Stream {
	t.Helper()
	var s jetstream.Stream
	var err error
	// Until the meta leader knows the three peers, placement fails ("no
	// suitable peers"); the same config again is no error once it exists.
	c.waitFor("the stream created", func() bool {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage,
			Replicas: 3, Duplicates: window,
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
// request in time: the stream's group has no leader for a moment, or the
// node that came back is still catching up and lets the request's own
// timeout (jetstream's default, the ctx having none) run out, which a
// loaded machine stretches past it.
func noResponders(err error) bool {
	return errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsgo.ErrTimeout)
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
	if err := onceEach(t, s, n); err != nil {
		t.Fatal(err)
	}
}

// errNotOnce is onceEach's finding.
var errNotOnce = errors.New("the stream does not hold each message once")

// onceEach reads the stream and returns an error matching errNotOnce
// unless it holds n messages, the ids "msg-0" to "msg-<n-1>", each once.
func onceEach(t testing.TB, s jetstream.Stream, n int) error {
	t.Helper()
	got, total := streamIDs(t, s)
	if total != n || len(got) != n {
		return fmt.Errorf("%w: %d messages of %d distinct ids, want %d", errNotOnce, total, len(got), n)
	}
	for i := range n {
		if k := got[fmt.Sprintf("msg-%d", i)]; k != 1 {
			return fmt.Errorf("%w: msg-%d stored %d times", errNotOnce, i, k)
		}
	}
	return nil
}

// TestClusterLeaderLoss relays clusterN messages into an R3 stream of a
// three-node cluster and, a quarter of the way in, takes a leader away
// mid-publish: the stream's leader or the meta leader, SIGKILLed (its
// nodes are child processes), or the stream's leader shut down (a Shutdown
// first hands its leadership over). Just before, the next lostAcks
// messages the old leader stores are reported to the relay as not
// delivered, and sent again only once a new leader is elected: the new
// leader must drop them as copies of what the old one stored, as it must
// drop the publishes whose PubAcks died with the old leader. The victim
// comes back on the same ports and store. The stream ends with every
// message exactly once by Nats-Msg-Id, the queue empty and no dead
// letter. It logs the throughput and the longest stall of completions
// from the loss on (the election). The control kills the stream's leader
// under a duplicate window of 100ms, which ends long before an election
// does (a follower waits seconds for a leader's heartbeat before it
// stands): the carried messages are then stored twice, and the check
// says so. It is not parallel with the package's other tests: its nine
// node processes load the machine (its four cases run side by side), and
// a settlement of a fake-clock test beside it timed out for good.
func TestClusterLeaderLoss(t *testing.T) {
	streamLeaderOf := func(c *cluster, js jetstream.JetStream) *node { return c.byName(streamLeader(js, "EV")) }
	for _, tc := range []struct {
		name    string
		procs   bool // the nodes are child processes, and the victim is SIGKILLed
		meta    bool // the victim is the meta leader, not the stream's
		victim  func(c *cluster, js jetstream.JetStream) *node
		window  time.Duration // the stream's duplicate window
		n       int
		control bool // the stream must hold copies
		move    bool // the stream's leadership moves just before the loss
	}{
		{"stream leader killed", true, false, streamLeaderOf, 10 * time.Minute, clusterN, false, false},
		{"meta leader killed", true, true, func(c *cluster, _ jetstream.JetStream) *node { return c.metaLeader() }, 10 * time.Minute, clusterN, false, false},
		{"stream leader shut down", false, false, streamLeaderOf, 10 * time.Minute, clusterN, false, false},
		{"stream leader moved, then shut down", false, false, streamLeaderOf, 10 * time.Minute, min(clusterN, 2000), false, true},
		{"control: stream leader killed, duplicate window 100ms", true, false, streamLeaderOf, 100 * time.Millisecond, min(clusterN, 2000), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, tc.procs)
			js := connectCluster(t, c, nil)
			s := windowStream(t, c, js, "EV", tc.window)
			if tc.meta {
				separateLeaders(t, c, js, "EV")
			}
			st := relaytest.OpenWallClock(t)
			relaytest.Send(t, st, relaytest.Bodies(tc.n, 256, true)...)
			// The relay's connection goes to the victim first, so that the
			// loss also cuts the PubAcks in flight: those messages are sent
			// again after AckTimeout and the stream drops the copies.
			victim := tc.victim(c, js)
			if victim == nil {
				t.Fatal("no leader to take away")
			}
			rjs := connectCluster(t, c, victim)
			start := time.Now()
			sink, err := relaynats.New(relaynats.Config{JetStream: rjs, Subject: "EV.x", AckTimeout: clusterAckTimeout})
			if err != nil {
				t.Fatal(err)
			}
			across := newAcrossLeaders(sink)
			obs := relaytest.Relay(t, st, across, relay.Config{
				Concurrency: 8, HoldBackoff: relayHold,
				Backoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			})
			obs.WaitFor(t, "a quarter", func(c relaytest.Counts) bool { return c.Completed >= tc.n/4 })
			across.carry.Store(true)
			select {
			case <-across.full:
			case <-time.After(relaytest.Timeout):
				t.Fatalf("timed out waiting for %d PubAcks to carry over", lostAcks)
			}
			if tc.move {
				_, _ = js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN.EV", nil, 2*time.Second)
				c.waitFor("the stream's leadership to move", func() bool {
					l := streamLeader(js, "EV")
					return l != "" && l != victim.name
				})
			}
			// Leadership may have moved since the relay connected: take
			// away the node that leads now, asked right before.
			if now := tc.victim(c, js); now != nil && now != victim {
				t.Logf("the leader moved from %s before the loss; taking %s away", victim.name, now.name)
				victim = now
			}
			if now := tc.victim(c, js); now != victim {
				t.Fatalf("taking %s away, which does not lead (%s does): the loss would be no leader's", victim.name, nodeName(now))
			}
			killed := time.Now()
			c.stop(victim)
			c.waitFor("a new leader", func() bool {
				if tc.meta {
					l := c.metaLeader()
					return l != nil && l != victim
				}
				l := streamLeader(js, "EV")
				return l != "" && l != victim.name
			})
			elected := time.Since(killed)
			close(across.elected)
			c.start(victim) // the same ports and store
			relaytest.WaitEmpty(t, st, obs)
			took := time.Since(start)
			c.waitFor("the stream current on all three", func() bool { return current(js, "EV") })
			if got := across.resent.Load(); got < lostAcks {
				t.Fatalf("%d carried messages sent again after the election, want %d", got, lostAcks)
			}
			err = onceEach(t, s, tc.n)
			if tc.control {
				if !errors.Is(err, errNotOnce) {
					t.Fatalf("a duplicate window of %v kept every message once: the check cannot fail", tc.window)
				}
				t.Logf("control: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d messages into R3 in %v (%.0f msgs/s); %s (%s): new leader in %v, longest stall of completions %v; %d messages sent again (same Nats-Msg-Id; %d stored by the old leader, sent to the new), each stored once",
				tc.n, took.Round(time.Millisecond), float64(tc.n)/took.Seconds(), tc.name, victim.name,
				elected.Round(time.Millisecond), obs.Stall(killed).Round(time.Millisecond), across.sent.Load()-int64(tc.n), lostAcks)
		})
	}
}

// nodeName is n's name, or "none".
func nodeName(n *node) string {
	if n == nil {
		return "none"
	}
	return n.name
}

// acrossLeaders wraps the relay's sink around a leader's loss. Once carry
// is set, it reports the next lostAcks messages the stream acknowledged
// as not delivered (full closes then), and it publishes none of them
// again before elected is closed (a retry of one is refused unpublished):
// each goes out a second time only to the new leader, which must drop it
// as a copy. It counts every message it publishes, copies included.
type acrossLeaders struct {
	relay.Sink
	sent    atomic.Int64
	resent  atomic.Int64 // carried messages the stream acknowledged after elected
	carry   atomic.Bool
	full    chan struct{}
	elected chan struct{}

	mu      sync.Mutex
	carried map[string]bool // by Nats-Msg-Id
}

// lostAcks is how many PubAcks acrossLeaders carries over the loss.
const lostAcks = 200

var (
	errLostAck            = errors.New("test: PubAck carried over the leader's loss")
	errNotYet             = errors.New("test: no new leader yet")
	_          relay.Sink = (*acrossLeaders)(nil)
)

func newAcrossLeaders(s relay.Sink) *acrossLeaders {
	return &acrossLeaders{Sink: s, full: make(chan struct{}), elected: make(chan struct{}), carried: map[string]bool{}}
}

func (a *acrossLeaders) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	var pass []mqlite.Message
	var at []int // index in msgs of each of pass
	a.mu.Lock()
	for i, m := range msgs {
		if a.carried[relay.ID(m)] && !isClosed(a.elected) {
			out[i] = relay.RetryAfter(errNotYet, 0)
			continue
		}
		pass, at = append(pass, m), append(at, i)
	}
	a.mu.Unlock()
	a.sent.Add(int64(len(pass)))
	got := a.Sink.Send(ctx, pass)
	a.mu.Lock()
	defer a.mu.Unlock()
	for j, o := range got {
		i, id := at[j], relay.ID(pass[j])
		out[i] = o
		switch {
		case !o.Delivered():
		case a.carried[id]:
			a.resent.Add(1)
		case a.carry.Load() && len(a.carried) < lostAcks:
			a.carried[id] = true
			out[i] = relay.RetryAfter(errLostAck, 0)
			if len(a.carried) == lostAcks {
				close(a.full)
			}
		}
	}
	return out
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
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
