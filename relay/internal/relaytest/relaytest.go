// Package relaytest holds the helpers the relay's and the sinks' tests
// share: a store with a queue to relay, a relay run in the background, an
// Observer to wait on, and the check for a loopback service. Library code
// never imports it.
package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// Queue is the queue the helpers relay.
const Queue = "events"

// Timeout bounds every wait of a test for the relay: far above what any
// step takes, so that only a hang trips it.
const Timeout = 60 * time.Second

// Open opens a store with a fake clock and its loops off (testdb.Open) and
// creates Queue with qopts. A zero MaxDeliveryCount becomes 10,000: a relay
// queue must outlast a far side that is down for a while.
func Open(t testing.TB, qopts mqlite.QueueOptions) *testdb.Bundle {
	t.Helper()
	b := testdb.Open(t, mqlite.Config{})
	if qopts.MaxDeliveryCount == 0 {
		qopts.MaxDeliveryCount = mqlite.MaxDeliveryLimit
	}
	b.Queue(t, Queue, qopts)
	return b
}

// OpenWallClock opens a store on the wall clock, with its reaper on, and
// creates Queue with a lease of 10s and MaxDeliveryLimit deliveries; the
// test's cleanup closes it. It is for the tests that load the machine
// (clusters, brokers, -race): there a settlement can pass its timeout,
// and, as in production, the lease then ends and the message goes out
// again, where the fake clock of Open would hold it for ever. Such tests
// wait with WaitEmpty, since a completion that timed out after its commit
// is never observed.
func OpenWallClock(t testing.TB) *mqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "relay.db"), mqlite.Config{ReaperInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	err = st.CreateQueue(ctx, Queue, mqlite.QueueOptions{MaxDeliveryCount: mqlite.MaxDeliveryLimit, LockDuration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// WaitEmpty waits until Queue of st holds nothing, dead letters included,
// checking after each of obs's events and every 100ms, and fails the test
// after Timeout.
func WaitEmpty(t testing.TB, st *mqlite.Store, obs *Observer) {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c, ch := obs.snapshot()
		s, err := st.Stats(context.Background(), Queue)
		if err != nil {
			t.Fatal(err)
		}
		if s.Total() == 0 {
			return
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-timer.C:
			t.Fatalf("timed out waiting for an empty queue: %+v; %d completed, %d abandoned, %d rejected, %d failed settlements",
				s, c.Completed, c.Abandoned, c.Rejected, len(c.SettleErrs))
		}
	}
}

// Poll calls cond every 10ms until it holds, failing the test after
// Timeout. It is for a far side whose state changes by itself (elections,
// a topic that grows), with nothing to wait on but its answers.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// PollGrowth polls count every 10ms until it reaches want, failing the
// test only when count stood still for Timeout: a far side that a busy
// machine slows down (a relay process filling a stream) takes longer, and
// only one that stopped fails.
func PollGrowth(t testing.TB, what string, count func() int64, want int64) {
	t.Helper()
	pollMoving(t, what, count, func(n int64) bool { return n >= want }, nil)
}

// pollMoving polls count every 10ms until done holds for it or stop is
// closed, failing the test when count stood still for Timeout.
func pollMoving(t testing.TB, what string, count func() int64, done func(int64) bool, stop <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, since := int64(-1), time.Now()
	for {
		n := count()
		if done(n) {
			return
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > Timeout {
			t.Fatalf("timed out waiting for %s: %d, no change for %v", what, n, Timeout)
		}
		select {
		case <-tick.C:
		case <-stop:
			return
		}
	}
}

// Send commits msgs to Queue, in transactions of up to 500, and returns
// their seqs.
func Send(t testing.TB, st *mqlite.Store, msgs ...outbox.Message) []int64 {
	t.Helper()
	var seqs []int64
	for len(msgs) > 0 {
		n := min(len(msgs), 500)
		res, err := outbox.Send(context.Background(), st, Queue, msgs[:n]...)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("send: %v", r.Err)
			}
			seqs = append(seqs, r.Seq)
		}
		msgs = msgs[n:]
	}
	return seqs
}

// Bodies returns n messages with distinct bodies of size bytes (at least
// the digits of their index), each its own MessageID when withID.
func Bodies(n, size int, withID bool) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		body := []byte(fmt.Sprintf("%08d", i))
		for len(body) < size {
			body = append(body, 'x')
		}
		msgs[i].Body = body
		if withID {
			msgs[i].MessageID = fmt.Sprintf("msg-%d", i)
		}
	}
	return msgs
}

// Start runs r in the background until stop, which cancels it, waits for
// Run to return and fails the test if it returned an error. The test's
// cleanup stops it too.
func Start(t testing.TB, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Relay starts a relay of Queue from src to sink with opts, its logs
// discarded unless opts has a Logger, and a new Observer, which it
// returns. The test's cleanup stops it.
func Relay(t testing.TB, src consumer.Store, sink relay.Sink, opts relay.Config) *Observer {
	t.Helper()
	obs := NewObserver()
	opts.Observer = obs
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := relay.New(src, Queue, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	Start(t, r)
	return obs
}

// Empty fails the test unless Queue holds nothing, dead letters included.
func Empty(t testing.TB, st *mqlite.Store) {
	t.Helper()
	s, err := st.Stats(context.Background(), Queue)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total() != 0 {
		t.Fatalf("queue not empty: %+v", s)
	}
}

// Service returns addr when a TCP server answers there. Otherwise it skips
// the test, or fails it when MQLITE_REQUIRE_SERVICES=1.
func Service(t testing.TB, name, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return addr
	}
	testdb.MissingService(t, name+" on "+addr, err)
	return ""
}

// Observer counts the relay's outcomes and lets a test wait for a count.
// It is safe for concurrent use.
type Observer struct {
	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every event
	completed  int
	times      []time.Time // of each completion, in order
	abandoned  int
	rejected   int
	held       int
	delays     []time.Duration
	causes     []error
	settleErrs []error
}

// NewObserver returns an Observer with no events.
func NewObserver() *Observer { return &Observer{changed: make(chan struct{})} }

func (o *Observer) event(f func()) {
	o.mu.Lock()
	f()
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
}

// Received ignores the claims.
func (o *Observer) Received(string, int) {}

// Completed counts a delivered message.
func (o *Observer) Completed(mqlite.Message, time.Duration) {
	now := time.Now()
	o.event(func() {
		o.completed++
		o.times = append(o.times, now)
	})
}

// Stall returns the longest wait for a completion after from: from to the
// first completion after it, or between two completions after it. It
// measures how long a relay stood still around a failure at from.
func (o *Observer) Stall(from time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var longest time.Duration
	prev := from
	for _, at := range o.times {
		if at.Before(from) {
			continue
		}
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	return longest
}

// Abandoned counts a message to be retried and keeps its delay and cause.
func (o *Observer) Abandoned(_ mqlite.Message, _, delay time.Duration, cause error) {
	o.event(func() {
		o.abandoned++
		o.delays = append(o.delays, delay)
		o.causes = append(o.causes, cause)
	})
}

// Held counts a hold: a message the sink answered with relay.Hold.
func (o *Observer) Held(mqlite.Message, string, error) { o.event(func() { o.held++ }) }

var _ relay.HoldObserver = (*Observer)(nil)

// Rejected counts a dead-lettered message.
func (o *Observer) Rejected(mqlite.Message, time.Duration, error) { o.event(func() { o.rejected++ }) }

// LockLost is not expected: the fake clock never ends a lease. It is
// counted as a settlement failure.
func (o *Observer) LockLost(_ mqlite.Message, err error) { o.SettleFailed(mqlite.Message{}, err) }

// SettleFailed counts a settlement that failed and keeps its error: the
// message stays locked, and with the fake clock its lease never ends, so
// a test that waits for it then times out and shows why.
func (o *Observer) SettleFailed(_ mqlite.Message, err error) {
	o.event(func() { o.settleErrs = append(o.settleErrs, err) })
}

// Counts is a snapshot of an Observer.
type Counts struct {
	Completed, Abandoned, Rejected int
	Held                           int // holds: a message held twice counts twice
	Delays                         []time.Duration
	Causes                         []error
	SettleErrs                     []error // settlements that failed (or lost their lock)
}

// Counts returns the counts so far.
func (o *Observer) Counts() Counts {
	c, _ := o.snapshot()
	return c
}

// snapshot returns the counts and the channel the next event closes.
func (o *Observer) snapshot() (Counts, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Counts{o.completed, o.abandoned, o.rejected, o.held, append([]time.Duration(nil), o.delays...),
		append([]error(nil), o.causes...), append([]error(nil), o.settleErrs...)}, o.changed
}

// WaitFor blocks until cond holds for the counts, failing the test after
// Timeout.
func (o *Observer) WaitFor(t testing.TB, what string, cond func(Counts) bool) Counts {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for {
		c, ch := o.snapshot()
		if cond(c) {
			return c
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("timed out waiting for %s; %d completed, %d abandoned (the last causes: %v), %d rejected; %d failed settlements (the last: %v)",
				what, c.Completed, c.Abandoned, c.Causes[max(0, len(c.Causes)-3):], c.Rejected,
				len(c.SettleErrs), c.SettleErrs[max(0, len(c.SettleErrs)-3):])
		}
	}
}

// ErrInjected is the failure tests inject.
var ErrInjected = errors.New("relaytest: injected failure")

// Logs keeps the messages of the records at or above WARN (testdb.Logs).
type Logs = testdb.Logs

// HoldSpy passes Sends to its Sink and hands the cause of a Send's first
// held message to Held, when Held has room.
type HoldSpy struct {
	relay.Sink
	Held chan error
}

// Send sends msgs through the Sink.
func (h HoldSpy) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := h.Sink.Send(ctx, msgs)
	for _, o := range out {
		if o.Hold {
			select {
			case h.Held <- o.Err:
			default:
			}
			break
		}
	}
	return out
}

// WaitHolds waits for n holds of spy, each for a cause that matches want
// (errors.Is), failing the test after Timeout.
func WaitHolds(t testing.TB, spy HoldSpy, n int, want error) {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for range n {
		select {
		case err := <-spy.Held:
			if !errors.Is(err, want) {
				t.Fatalf("held for %v, want %v", err, want)
			}
		case <-timer.C:
			t.Fatal("timed out waiting for a hold")
		}
	}
}

// emptyWatch is the Observer of a crash test's relay process: each
// completion pokes it, without waiting, so that watch checks whether Queue
// is empty. A Stats per completion, inside the relay's loop, held the
// loop for most of its time (153 completions of one batch, each counting
// thousands of messages under the race detector).
type emptyWatch struct {
	consumer.NopObserver
	poke chan struct{} // room for one: pokes coalesce
}

// Completed pokes the watcher.
func (e emptyWatch) Completed(mqlite.Message, time.Duration) {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// watch cancels once a poke finds Queue of st empty, or returns when ctx
// ends.
func (e emptyWatch) watch(ctx context.Context, st *mqlite.Store, cancel context.CancelFunc) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.poke:
			if s, err := st.Stats(ctx, Queue); err == nil && s.Total() == 0 {
				cancel()
				return
			}
		}
	}
}

// RunUntilEmpty is the body of a crash test's relay process: it relays
// Queue of st to sink with opts (its logs discarded) until the queue is
// empty, failing the test on an error.
func RunUntilEmpty(t testing.TB, st *mqlite.Store, sink relay.Sink, opts relay.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := emptyWatch{poke: make(chan struct{}, 1)}
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Observer = w
	r, err := relay.New(st, Queue, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.watch(ctx, st, cancel)
	}()
	err = r.Run(ctx)
	cancel()
	<-watched
	if err != nil {
		t.Fatal(err)
	}
}

// StartWorker starts this test binary again, running only the test named
// worker, with env added to the environment and its output on stderr. The
// test's cleanup kills it (a no-op once it exited).
func StartWorker(t testing.TB, worker string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+worker+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd
}

// Intake runs an intake of src into Queue of st with cfg in the
// background, its logs discarded unless cfg has a Logger; stop cancels it
// and returns Run's error. The test's cleanup stops it too.
func Intake(t testing.TB, st *mqlite.Store, src relay.Source, cfg relay.IntakeConfig) (stop func() error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	in, err := relay.NewIntake(st, Queue, src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Total returns how many messages Queue of st holds, dead letters
// included.
func Total(t testing.TB, st *mqlite.Store) int64 {
	t.Helper()
	s, err := st.Stats(context.Background(), Queue)
	if err != nil {
		t.Fatal(err)
	}
	return s.Total()
}

// IntakeUntil is the body of a source crash test's worker process: it
// takes src into Queue of st with cfg (its logs discarded) until the
// queue holds n messages, failing the test on an error.
func IntakeUntil(t testing.TB, st *mqlite.Store, src relay.Source, cfg relay.IntakeConfig, n int64) {
	t.Helper()
	stop := Intake(t, st, src, cfg)
	PollGrowth(t, "the queue to fill", func() int64 { return Total(t, st) }, n)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Good is the id and the body of the i-th good message of a source's
// poisoned-message test, which publishes on the far side, in this order,
// the good message i then the i-th poisoned one, for each poisoned one,
// and a last good message.
func Good(i int) string { return fmt.Sprintf("good-%d", i) }

// LongID is a message id over mqlite.MaxMessageIDLen.
var LongID = strings.Repeat("i", mqlite.MaxMessageIDLen+1)

// BigHeader is a header value over mqlite.MaxPropertiesBytes.
var BigHeader = strings.Repeat("h", mqlite.MaxPropertiesBytes+1)

// CheckPoisoned runs an intake of src into Queue of st, whose far side
// holds the good and poisoned messages of a poisoned-message test (reasons
// says why the queue refuses each poisoned one), until every good one is in
// the queue, in order, and every poisoned one is held aside in the hold
// queue with its reason, and unacked (the far side's messages not
// acknowledged, or ready) is 0; then it stops the intake. It logs what it
// saw.
func CheckPoisoned(t *testing.T, st *mqlite.Store, src relay.Source, reasons []string, unacked func() int64) {
	t.Helper()
	logs := &Logs{}
	stop := Intake(t, st, src, relay.IntakeConfig{Logger: logs.Logger(), MaxBatch: 4})
	hold := Queue + ".held"
	held := func() []mqlite.Message {
		msgs, err := st.Peek(context.Background(), hold, mqlite.PeekParams{Max: 100})
		if err != nil && !errors.Is(err, mqlite.ErrQueueNotFound) {
			t.Fatal(err)
		}
		return msgs
	}
	Poll(t, "every good message taken, every poisoned one held aside, nothing unacknowledged", func() bool {
		return Total(t, st) == int64(len(reasons)+1) && len(held()) == len(reasons) && unacked() == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range len(reasons) + 1 {
		want = append(want, Good(i))
	}
	got := testdb.Strings(t, st.DB(), "SELECT message_id FROM mqlite_messages WHERE queue = ? ORDER BY id", Queue)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("queue holds %v, want %v", got, want)
	}
	for i, h := range held() {
		if r := h.Properties[relay.HeaderHeldReason]; r != reasons[i] {
			t.Errorf("held %d: reason %q, want %q (%v)", i, r, reasons[i], h.Properties)
		}
		if h.Properties[relay.HeaderHeldOrigin] == "" {
			t.Errorf("held %d names no origin: %v", i, h.Properties)
		}
	}
	if n := strings.Count(strings.Join(logs.Messages(), "\n"), "held aside"); n != len(reasons) {
		t.Errorf("%d log lines say a message was held aside, want %d", n, len(reasons))
	}
	t.Logf("%d good messages taken in order, %d poisoned held aside in %s, the far side drained", len(want), len(reasons), hold)
}
