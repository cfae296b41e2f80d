package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// Loop's tests run in a synctest bubble: the store is opened inside it with
// the system clock, so the store's timestamps, Receive's wait and Loop's
// renewal timers all read the bubble's fake time. Time moves only when
// every goroutine of the bubble is blocked, and then straight to the next
// timer: advance is a jump of the fake clock, never a real sleep.

// loopEnv is one bubble's store and recorders.
type loopEnv struct {
	t   *testing.T
	st  *mqlite.Store
	src *countingStore
	obs *recorder
	log *bytes.Buffer
}

// bubble runs f in a synctest bubble with a fresh store holding queue "q".
func bubble(t *testing.T, qopts mqlite.QueueOptions, f func(t *testing.T, e *loopEnv)) {
	t.Helper()
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		if qopts.LockDuration == 0 {
			qopts.LockDuration = lease
		}
		must(t, st.CreateQueue(ctx, "q", qopts))
		f(t, &loopEnv{t: t, st: st, src: &countingStore{Store: st}, obs: &recorder{}, log: &bytes.Buffer{}})
	})
}

// advance moves the bubble's fake clock by d (the test goroutine sleeps
// in fake time while the others run whatever falls due), then waits for
// the bubble to settle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// start runs Loop on queue "q" in the background; stop cancels it and
// returns Loop's result.
func (e *loopEnv) start(h consumer.Handler, opts consumer.LoopConfig) (stop func() error) {
	opts = e.options(opts)
	return e.launch(func(lctx context.Context) error { return consumer.Loop(lctx, e.src, "q", h, opts) })
}

// options sets opts' Observer and, when unset, its Logger to e's recorders.
func (e *loopEnv) options(opts consumer.LoopConfig) consumer.LoopConfig {
	opts.Observer = e.obs
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: e.log}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return opts
}

// launch runs loop in the background; stop cancels its ctx and returns its
// result.
func (e *loopEnv) launch(loop func(ctx context.Context) error) (stop func() error) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop(lctx) }()
	synctest.Wait() // Loop is up and waiting in Receive
	return func() error {
		cancel()
		return <-done
	}
}

func (e *loopEnv) send(bodies ...string) []int64 {
	e.t.Helper()
	var seqs []int64
	must(e.t, e.st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, b := range bodies {
			seq, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte(b)})
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	}))
	return seqs
}

// peek returns queue q's messages by seq.
func (e *loopEnv) peek() map[int64]mqlite.Message {
	e.t.Helper()
	msgs, err := e.st.Peek(ctx, "q", mqlite.PeekParams{})
	must(e.t, err)
	out := map[int64]mqlite.Message{}
	for _, m := range msgs {
		out[m.Seq] = m
	}
	return out
}

// countingStore counts the calls Loop makes.
type countingStore struct {
	consumer.Store
	receives, settles atomic.Int64
}

func (s *countingStore) Receive(ctx context.Context, q string, o mqlite.ReceiveOptions) ([]mqlite.Message, error) {
	s.receives.Add(1)
	return s.Store.Receive(ctx, q, o)
}

func (s *countingStore) Complete(ctx context.Context, l mqlite.Lock) error {
	s.settles.Add(1)
	return s.Store.Complete(ctx, l)
}

// CompleteBatch counts each lock as a settlement.
func (s *countingStore) CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error) {
	s.settles.Add(int64(len(locks)))
	return s.Store.CompleteBatch(ctx, locks)
}

// CompleteAndReceive counts each lock as a settlement (receives counts
// calls of Receive alone).
func (s *countingStore) CompleteAndReceive(ctx context.Context, q string, locks []mqlite.Lock, o mqlite.ReceiveOptions) ([]error, []mqlite.Message, error) {
	s.settles.Add(int64(len(locks)))
	return s.Store.CompleteAndReceive(ctx, q, locks, o)
}

// oneByOne completes each message in a commit of its own, and claims
// apart from completing: a Store without batched completions.
type oneByOne struct{ consumer.Store }

func (s oneByOne) CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error) {
	out := make([]error, len(locks))
	for i, l := range locks {
		out[i] = s.Complete(ctx, l)
	}
	return out, nil
}

func (s oneByOne) CompleteAndReceive(ctx context.Context, q string, locks []mqlite.Lock, o mqlite.ReceiveOptions) ([]error, []mqlite.Message, error) {
	res, _ := s.CompleteBatch(ctx, locks)
	msgs, err := s.Receive(ctx, q, mqlite.ReceiveOptions{Max: o.Max})
	return res, msgs, err
}

func (s *countingStore) Abandon(ctx context.Context, l mqlite.Lock, d time.Duration) error {
	s.settles.Add(1)
	return s.Store.Abandon(ctx, l, d)
}

func (s *countingStore) Reject(ctx context.Context, l mqlite.Lock, r, d string) error {
	s.settles.Add(1)
	return s.Store.Reject(ctx, l, r, d)
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []string
	delays []time.Duration
	took   []time.Duration
	causes []error
}

func (r *recorder) add(ev string, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.took = append(r.took, took)
	r.causes = append(r.causes, err)
}

func (r *recorder) Received(_ string, n int) { r.add(fmt.Sprintf("received %d", n), 0, nil) }
func (r *recorder) Completed(m mqlite.Message, took time.Duration) {
	r.add(fmt.Sprintf("completed %d", m.Seq), took, nil)
}
func (r *recorder) Abandoned(m mqlite.Message, took, delay time.Duration, err error) {
	r.mu.Lock()
	r.delays = append(r.delays, delay)
	r.mu.Unlock()
	r.add(fmt.Sprintf("abandoned %d", m.Seq), took, err)
}
func (r *recorder) Rejected(m mqlite.Message, took time.Duration, err error) {
	r.add(fmt.Sprintf("rejected %d", m.Seq), took, err)
}
func (r *recorder) LockLost(m mqlite.Message, err error) {
	r.add(fmt.Sprintf("lock lost %d", m.Seq), 0, err)
}
func (r *recorder) SettleFailed(m mqlite.Message, err error) {
	r.add(fmt.Sprintf("settle failed %d", m.Seq), 0, err)
}

func (r *recorder) tookAt(i int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.took[i]
}

func (r *recorder) causeAt(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.causes[i]
}

func (r *recorder) delayList() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.delays)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// lockedWriter serializes the log handler's writes into a buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func wantEvents(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if got := r.list(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// guarded is a value shared between a handler and the test.
type guarded[T any] struct {
	mu sync.Mutex
	v  T
}

func (g *guarded[T]) set(v T) {
	g.mu.Lock()
	g.v = v
	g.mu.Unlock()
}

func (g *guarded[T]) get() T {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v
}

func (g *guarded[T]) update(f func(T) T) {
	g.mu.Lock()
	g.v = f(g.v)
	g.mu.Unlock()
}

// exact is a backoff without jitter: 1s, 2s, 4s, ... up to 1 minute.
var exact = consumer.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: -1}

func TestLoopWakesOnCommitWithoutPolling(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		got := make(chan string, 10)
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			got <- string(m.Body)
			return nil
		}, consumer.LoopConfig{})
		begin := time.Now()
		if n := e.src.receives.Load(); n != 1 {
			t.Fatalf("%d Receives before any send, want 1 (waiting)", n)
		}

		// A rolled-back send wakes nothing: no handler, no new Receive.
		rolledBack := errors.New("roll back")
		err := e.st.Tx(ctx, func(tx *mqlite.Tx) error {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("never")}); err != nil {
				return err
			}
			return rolledBack
		})
		if !errors.Is(err, rolledBack) {
			t.Fatal(err)
		}
		synctest.Wait()
		if len(got) != 0 || e.src.receives.Load() != 1 {
			t.Fatalf("rolled-back send: %d handled, %d Receives", len(got), e.src.receives.Load())
		}

		// A committed send reaches the waiting Loop with no time passing:
		// the commit itself wakes it, not a poll interval.
		seq := e.send("yes")[0]
		synctest.Wait()
		if len(got) != 1 || <-got != "yes" {
			t.Fatal("the committed message was not handled")
		}
		if d := time.Since(begin); d != 0 {
			t.Fatalf("fake time moved %v before the handler ran; want 0 (no polling)", d)
		}
		if n := e.src.receives.Load(); n != 2 {
			t.Fatalf("%d Receives, want 2 (the one that claimed, the next waiting)", n)
		}
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("left in the queue: %v", left)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("completed %d", seq))

		// Idle for ten minutes of fake time: one Receive per minute at
		// most (each bounded, not polling), and nothing else.
		advance(10 * time.Minute)
		if n := e.src.receives.Load(); n > 2+10 {
			t.Fatalf("%d Receives in ten idle minutes", n)
		}
		must(t, stop())
	})
}

func TestLoopWakesAtScheduledTime(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		var at atomic.Int64
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			at.Store(time.Now().UnixMilli())
			return nil
		}, consumer.LoopConfig{})
		due := time.Now().Add(7 * time.Second)
		_, err := outbox.Send(ctx, e.st, "q", outbox.Message{Body: []byte("later"), DeliverAt: due})
		must(t, err)
		advance(7*time.Second - time.Millisecond)
		if at.Load() != 0 {
			t.Fatal("handled before its DeliverAt")
		}
		advance(time.Millisecond)
		if got := at.Load(); got != due.UnixMilli() {
			t.Fatalf("handled at %v, want exactly %v", time.UnixMilli(got), due)
		}
		must(t, stop())
	})
}

func TestLoopRenewsSlowHandlerLease(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		release := make(chan struct{})
		var cause guarded[error]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				cause.set(context.Cause(ctx))
				return ctx.Err()
			}
		}, consumer.LoopConfig{Concurrency: 1, Prefetch: 1})
		// One message runs; the other waits, prefetched, for the handler.
		seqs := e.send("slow", "waiting")
		synctest.Wait()
		first := map[int64]time.Time{}
		for _, seq := range seqs {
			m := e.peek()[seq]
			if m.State != "locked" {
				t.Fatalf("seq %d: state %q, want locked", seq, m.State)
			}
			first[seq] = m.LockedUntil
		}

		// Far past the original lease: renewals at half the remaining lease
		// kept both running, the waiting one too.
		advance(3*lease + time.Second)
		for _, seq := range seqs {
			m := e.peek()[seq]
			if m.State != "locked" || !m.LockedUntil.After(time.Now()) || !m.LockedUntil.After(first[seq]) {
				t.Fatalf("seq %d after %v: state %q, locked until %v (first %v, now %v)",
					seq, 3*lease, m.State, m.LockedUntil, first[seq], time.Now())
			}
			if m.DeliveryCount != 1 {
				t.Fatalf("seq %d: delivery count %d, want 1: the lease lapsed and the message was claimed again", seq, m.DeliveryCount)
			}
		}
		close(release)
		synctest.Wait()
		if err := cause.get(); err != nil {
			t.Fatalf("handler ctx cancelled: %v", err)
		}
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("left in the queue: %v", left)
		}
		wantEvents(t, e.obs, "received 2", fmt.Sprintf("completed %d", seqs[0]), fmt.Sprintf("completed %d", seqs[1]))
		if took := e.obs.tookAt(1); took != 3*lease+time.Second {
			t.Errorf("handler duration %v, want %v", took, 3*lease+time.Second)
		}
		must(t, stop())
	})
}

func TestLoopLostLeaseCancelsHandler(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		running := make(chan mqlite.Message, 1)
		var causeBox guarded[error]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			running <- m
			<-ctx.Done()
			causeBox.set(context.Cause(ctx))
			return ctx.Err()
		}, consumer.LoopConfig{})
		e.send("stolen")
		synctest.Wait()
		m := <-running
		// Settle the delivery out from under the handler: its lock is gone.
		must(t, e.st.Complete(ctx, m.Lock()))
		advance(lease / 2) // the renewal finds the lock lost
		cause := causeBox.get()
		if !errors.Is(cause, mqlite.ErrLockLost) {
			t.Fatalf("handler ctx cause %v, want mqlite.ErrLockLost", cause)
		}
		if !strings.Contains(cause.Error(), "lease") {
			t.Errorf("cause %q does not say the lease was lost", cause)
		}
		if n := e.src.settles.Load(); n != 0 {
			t.Fatalf("Loop settled %d times a delivery whose lock was lost", n)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("lock lost %d", m.Seq))
		must(t, stop())
	})
}

func TestLoopExpiredLeaseIsNotSettledTwice(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		// The renewal fails as the lease ends while the handler runs, and
		// another consumer claims the message again: the stale handler's
		// outcome must not touch the new delivery.
		var calls atomic.Int64
		src := &failingRenewals{Store: e.src}
		e.src = &countingStore{Store: src}
		release := make(chan struct{})
		var cause guarded[error]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			calls.Add(1)
			<-release
			cause.set(context.Cause(ctx))
			return nil
		}, consumer.LoopConfig{Concurrency: 1, Prefetch: -1})
		seq := e.send("x")[0]
		synctest.Wait()
		src.fail.Store(true)
		advance(lease) // renewals fail; the lease ends
		src.fail.Store(false)
		// Another consumer takes the message now.
		msgs, err := e.st.Receive(ctx, "q", mqlite.ReceiveOptions{})
		must(t, err)
		if len(msgs) != 1 || msgs[0].Seq != seq || msgs[0].DeliveryCount != 2 {
			t.Fatalf("other consumer got %+v", msgs)
		}
		advance(10 * time.Millisecond) // the next renewal attempt finds the lock lost
		close(release)
		synctest.Wait()
		if err := cause.get(); !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("cause %v, want mqlite.ErrLockLost", err)
		}
		if n := e.src.settles.Load(); n != 0 {
			t.Fatalf("Loop settled %d times after losing the lock", n)
		}
		if m := e.peek()[seq]; m.State != "locked" || m.DeliveryCount != 2 {
			t.Fatalf("the other consumer's delivery was disturbed: %+v", m)
		}
		must(t, e.st.Complete(ctx, msgs[0].Lock())) // the new delivery's token still works
		must(t, stop())
		if calls.Load() != 1 {
			t.Fatalf("handler ran %d times", calls.Load())
		}
	})
}

// failingRenewals fails every RenewBatch while fail is set, as a broker
// that cannot be reached would.
type failingRenewals struct {
	consumer.Store
	fail atomic.Bool
}

func (f *failingRenewals) RenewBatch(ctx context.Context, locks []mqlite.Lock) ([]mqlite.RenewResult, error) {
	if f.fail.Load() {
		return nil, errors.New("renew: connection refused")
	}
	return f.Store.RenewBatch(ctx, locks)
}

func TestLoopBacksOffWithGrowingDelays(t *testing.T) {
	bubble(t, mqlite.QueueOptions{MaxDeliveryCount: 4}, func(t *testing.T, e *loopEnv) {
		var countsBox guarded[[]int]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			countsBox.update(func(c []int) []int { return append(c, m.DeliveryCount) })
			return errors.New("downstream unavailable")
		}, consumer.LoopConfig{Backoff: exact})
		seq := e.send("retry me")[0]
		synctest.Wait()
		for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			m := e.peek()[seq]
			if want := time.Now().Add(delay); m.State != "scheduled" || !m.VisibleAt.Equal(want) {
				t.Fatalf("after delivery %d: state %q visible at %v, want scheduled at %v", i+1, m.State, m.VisibleAt, want)
			}
			advance(delay - time.Millisecond)
			if n := len(countsBox.get()); n != i+1 {
				t.Fatalf("delivered %d times before the delay ended, want %d", n, i+1)
			}
			advance(time.Millisecond)
		}
		if counts := countsBox.get(); !slices.Equal(counts, []int{1, 2, 3, 4}) {
			t.Fatalf("delivery counts %v", counts)
		}
		// The fourth failure was the last allowed delivery: dead-lettered.
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		if len(dead) != 1 || dead[0].Seq != seq {
			t.Fatalf("dead letters %v", testdb.Seqs(dead))
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
		if delays := e.obs.delayList(); !slices.Equal(delays, want) {
			t.Fatalf("abandon delays %v, want %v", delays, want)
		}
		must(t, stop())
	})
}

func TestLoopPermanentErrorDeadLetters(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			return fmt.Errorf("decode: %w", consumer.Permanent(errors.New("field total missing")))
		}, consumer.LoopConfig{})
		seq := e.send("{}")[0]
		synctest.Wait()
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		if len(dead) != 1 || dead[0].Seq != seq || dead[0].DeadLetterReason != "decode: field total missing" || dead[0].DeliveryCount != 1 {
			t.Fatalf("dead letters %+v", dead)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("rejected %d", seq))
		must(t, stop())
	})
}

func TestLoopSurvivesPanic(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			if string(m.Body) == "boom" {
				panic("nil map somewhere")
			}
			return nil
		}, consumer.LoopConfig{Backoff: exact})
		seqs := e.send("boom")
		synctest.Wait()
		seqs = append(seqs, e.send("fine")...)
		synctest.Wait()
		left := e.peek()
		if m := left[seqs[0]]; len(left) != 1 || m.State != "scheduled" || !m.VisibleAt.Equal(time.Now().Add(time.Second)) {
			t.Fatalf("queue after the panic: %+v", left)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("abandoned %d", seqs[0]), "received 1", fmt.Sprintf("completed %d", seqs[1]))
		var pe *consumer.PanicError
		if err := e.obs.causeAt(1); !errors.As(err, &pe) || pe.Value != "nil map somewhere" {
			t.Fatalf("abandon cause %v, want a *PanicError", err)
		}
		log := e.log.String()
		if !strings.Contains(log, "handler panicked") || !strings.Contains(log, "loop_test.go") {
			t.Fatalf("log lacks the panic and its stack:\n%s", log)
		}
		must(t, stop())
	})
}

func TestLoopShutdownReleasesAndAbandonsHeldMessages(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		var causesBox guarded[[]error]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			<-ctx.Done() // a handler that takes until it is cancelled
			causesBox.update(func(c []error) []error { return append(c, context.Cause(ctx)) })
			return ctx.Err()
		}, consumer.LoopConfig{Concurrency: 1, Prefetch: 2, DrainTimeout: 5 * time.Second, Backoff: exact})
		seqs := e.send("a", "b", "c", "d")
		synctest.Wait()
		held := e.peek()
		if held[seqs[0]].State != "locked" || held[seqs[1]].State != "locked" || held[seqs[2]].State != "locked" ||
			held[seqs[3]].State != "active" {
			t.Fatalf("before stop, want 3 held (1 running, 2 prefetched): %+v", held)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		synctest.Wait()
		// The prefetched ones are released at once; the running one drains.
		held = e.peek()
		if held[seqs[0]].State != "locked" || held[seqs[1]].State != "active" || held[seqs[2]].State != "active" {
			t.Fatalf("just after stop: %+v", held)
		}
		select {
		case err := <-stopped:
			t.Fatalf("Loop returned %v before the drain timeout", err)
		default:
		}
		advance(5 * time.Second)
		must(t, <-stopped)
		causes := causesBox.get()
		if len(causes) != 1 || !errors.Is(causes[0], consumer.ErrDrainTimeout) {
			t.Fatalf("handler ctx causes %v, want ErrDrainTimeout", causes)
		}
		for _, seq := range seqs {
			if m := e.peek()[seq]; m.State != "active" || m.DeliveryCount > 1 {
				t.Errorf("seq %d after shutdown: state %q, delivery count %d; want active at once", seq, m.State, m.DeliveryCount)
			}
		}
		if got := e.obs.list(); len(got) != 4 || !slices.Contains(got, fmt.Sprintf("abandoned %d", seqs[0])) {
			t.Fatalf("events %q", got)
		}
		for _, d := range e.obs.delayList() {
			if d != 0 {
				t.Errorf("shutdown abandoned with delay %v, want 0", d)
			}
		}
	})
}

func TestLoopShutdownLetsRunningHandlerFinish(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		release := make(chan struct{})
		var cause guarded[error]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			<-release
			cause.set(context.Cause(ctx))
			return nil
		}, consumer.LoopConfig{})
		seq := e.send("finish me")[0]
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		advance(10 * time.Second) // inside the default drain timeout
		close(release)
		must(t, <-stopped)
		if err := cause.get(); err != nil {
			t.Fatalf("handler ctx cancelled: %v", err)
		}
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("the ack of a finished handler was dropped: %+v", left)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("completed %d", seq))
	})
}

func TestLoopRunsConcurrentlyAndPrefetches(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			testLoopConcurrency(t, batched)
		})
	}
}

func testLoopConcurrency(t *testing.T, batched bool) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		if !batched {
			e.src = &countingStore{Store: oneByOne{e.st}}
		}
		release := make(chan struct{})
		var running, most atomic.Int64
		var handled atomic.Int64
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			n := running.Add(1)
			for {
				old := most.Load()
				if n <= old || most.CompareAndSwap(old, n) {
					break
				}
			}
			<-release
			running.Add(-1)
			handled.Add(1)
			return nil
		}, consumer.LoopConfig{Concurrency: 4, Prefetch: 3})
		bodies := make([]string, 20)
		for i := range bodies {
			bodies[i] = fmt.Sprint(i)
		}
		e.send(bodies...)
		synctest.Wait()
		locked := 0
		for _, m := range e.peek() {
			if m.State == "locked" {
				locked++
			}
		}
		if running.Load() != 4 || locked != 7 {
			t.Fatalf("%d running, %d locked; want 4 running and 7 held", running.Load(), locked)
		}
		close(release)
		synctest.Wait()
		if handled.Load() != 20 || most.Load() != 4 {
			t.Fatalf("handled %d, at most %d at once", handled.Load(), most.Load())
		}
		if left := e.peek(); len(left) != 0 || e.src.settles.Load() != 20 {
			t.Fatalf("after 20 handled: %d left, %d settlements", len(left), e.src.settles.Load())
		}
		completed := 0
		for _, ev := range e.obs.list() {
			if strings.HasPrefix(ev, "completed ") {
				completed++
			}
		}
		if completed != 20 {
			t.Fatalf("%d Completed events, want 20", completed)
		}
		must(t, stop())
	})
}

func TestLoopReturnsWhenTheStoreCloses(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		done := make(chan error, 1)
		go func() {
			done <- consumer.Loop(ctx, e.st, "q", func(context.Context, mqlite.Message) error { return nil },
				consumer.LoopConfig{Logger: slog.New(slog.DiscardHandler)})
		}()
		synctest.Wait()
		must(t, e.st.Close())
		if err := <-done; !errors.Is(err, mqlite.ErrClosed) {
			t.Fatalf("Loop returned %v, want ErrClosed", err)
		}
	})
}

func TestLoopBadArguments(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	nop := func(context.Context, mqlite.Message) error { return nil }
	for _, tc := range []struct {
		name    string
		src     consumer.Store
		queue   string
		handler consumer.Handler
		opts    consumer.LoopConfig
		want    error
	}{
		{"nil store", nil, "q", nop, consumer.LoopConfig{}, mqlite.ErrInvalidArgument},
		{"nil handler", b.src, "q", nil, consumer.LoopConfig{}, mqlite.ErrInvalidArgument},
		{"negative concurrency", b.src, "q", nop, consumer.LoopConfig{Concurrency: -1}, mqlite.ErrInvalidArgument},
		{"bad prefetch", b.src, "q", nop, consumer.LoopConfig{Prefetch: -2}, mqlite.ErrInvalidArgument},
		{"bad drain", b.src, "q", nop, consumer.LoopConfig{DrainTimeout: -2}, mqlite.ErrInvalidArgument},
		{"bad settle", b.src, "q", nop, consumer.LoopConfig{SettleTimeout: -1}, mqlite.ErrInvalidArgument},
		{"bad multiplier", b.src, "q", nop, consumer.LoopConfig{Backoff: consumer.Backoff{Multiplier: 0.5}}, mqlite.ErrInvalidArgument},
		{"bad jitter", b.src, "q", nop, consumer.LoopConfig{Backoff: consumer.Backoff{Jitter: 2}}, mqlite.ErrInvalidArgument},
		{"initial above max", b.src, "q", nop, consumer.LoopConfig{Backoff: consumer.Backoff{Initial: time.Hour, Max: time.Minute}}, mqlite.ErrInvalidArgument},
		{"bad queue name", b.src, "", nop, consumer.LoopConfig{}, mqlite.ErrInvalidQueueName},
		{"unknown queue", b.src, "nope", nop, consumer.LoopConfig{}, mqlite.ErrQueueNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := consumer.Loop(ctx, tc.src, tc.queue, tc.handler, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestLoopHandsOutTheNextOfAGroupAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordered mqlite.Ordering
		group   string
	}{{"group", mqlite.Standard, "g"}, {"fifo", mqlite.FIFO, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, mqlite.QueueOptions{Ordering: tc.ordered}, func(t *testing.T, e *loopEnv) {
				var got guarded[[]string]
				stop := e.start(func(ctx context.Context, m mqlite.Message) error {
					got.update(func(s []string) []string { return append(s, string(m.Body)) })
					return nil
				}, consumer.LoopConfig{Concurrency: 2})
				begin := time.Now()
				must(t, e.st.Tx(ctx, func(tx *mqlite.Tx) error {
					for _, b := range []string{"1", "2", "3"} {
						if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte(b), GroupID: tc.group}); err != nil {
							return err
						}
					}
					return nil
				}))
				synctest.Wait()
				if g := got.get(); !slices.Equal(g, []string{"1", "2", "3"}) || time.Since(begin) != 0 {
					t.Fatalf("handled %v after %v; want all three in order at once", g, time.Since(begin))
				}
				must(t, stop())
			})
		})
	}
}

// abandonSignal reports each Abandoned event on a channel.
type abandonSignal struct {
	consumer.NopObserver
	ch chan time.Duration
}

func (a abandonSignal) Abandoned(_ mqlite.Message, _, delay time.Duration, _ error) { a.ch <- delay }

func TestLoopOnTheStoresFakeClock(t *testing.T) {
	// Outside a bubble: the store runs on testdb's fake clock, and Loop
	// is given the same clock for its lease arithmetic.
	b := setup(t, mqlite.QueueOptions{})
	obs := abandonSignal{ch: make(chan time.Duration, 1)}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Loop(lctx, b.src, "q", func(context.Context, mqlite.Message) error {
			return errors.New("not yet")
		}, consumer.LoopConfig{Backoff: exact, Observer: obs, Logger: slog.New(slog.DiscardHandler)})
	}()
	seq := b.Send(t, "q", outbox.Message{})[0]
	select {
	case delay := <-obs.ch:
		if delay != time.Second {
			t.Fatalf("abandoned with delay %v, want 1s", delay)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not handled")
	}
	msgs, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(msgs) != 1 || msgs[0].Seq != seq || msgs[0].State != "scheduled" || !msgs[0].VisibleAt.Equal(b.Clock.Now().Add(time.Second)) {
		t.Fatalf("after the failure: %+v", msgs)
	}
	cancel()
	must(t, <-done)
}

// flakyReceives fails the first n Receives, as a broker that restarts would.
type flakyReceives struct {
	consumer.Store
	n atomic.Int64
}

func (f *flakyReceives) Receive(ctx context.Context, q string, o mqlite.ReceiveOptions) ([]mqlite.Message, error) {
	if f.n.Add(-1) >= 0 {
		return nil, errors.New("receive: connection reset")
	}
	return f.Store.Receive(ctx, q, o)
}

func TestLoopRetriesFailedReceives(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		flaky := &flakyReceives{Store: e.st}
		flaky.n.Store(3)
		e.src = &countingStore{Store: flaky}
		seq := e.send("x")[0]
		stop := e.start(func(context.Context, mqlite.Message) error { return nil }, consumer.LoopConfig{})
		// Retried after 100ms, 200ms and 400ms (±20% jitter): 560ms to 840ms.
		advance(500 * time.Millisecond)
		wantEvents(t, e.obs)
		advance(500 * time.Millisecond)
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("completed %d", seq))
		if n := strings.Count(e.log.String(), "receive failed; retrying"); n != 3 {
			t.Fatalf("%d retries logged, want 3:\n%s", n, e.log.String())
		}
		must(t, stop())
	})
}

func TestLoopStopStress(t *testing.T) {
	// Each stop gives back what it held, counting a delivery: allow enough.
	bubble(t, mqlite.QueueOptions{MaxDeliveryCount: 1000}, func(t *testing.T, e *loopEnv) {
		const total = 60
		bodies := make([]string, total)
		for i := range bodies {
			bodies[i] = fmt.Sprint(i)
		}
		e.send(bodies...)
		var done guarded[map[string]int]
		done.set(map[string]int{})
		h := func(ctx context.Context, m mqlite.Message) error {
			// Handlers take 0 to 90ms of fake time; some honour ctx.
			work := time.Duration(m.Seq*7%10) * 10 * time.Millisecond
			select {
			case <-time.After(work):
			case <-ctx.Done():
				if m.Seq%2 == 0 {
					return ctx.Err()
				}
				<-time.After(work)
			}
			done.update(func(d map[string]int) map[string]int { d[string(m.Body)]++; return d })
			return nil
		}
		for i := range 15 {
			drain := []time.Duration{-1, 20 * time.Millisecond, 40 * time.Millisecond}[i%3]
			stop := e.start(h, consumer.LoopConfig{Concurrency: 1 + i%4, Prefetch: i%3 - 1, DrainTimeout: drain})
			advance(time.Duration(i*13%50) * time.Millisecond)
			must(t, stop())
			for seq, m := range e.peek() {
				if m.State != "active" {
					t.Fatalf("run %d: seq %d left %q after Loop returned", i, seq, m.State)
				}
			}
		}
		stop := e.start(h, consumer.LoopConfig{Concurrency: 4})
		advance(time.Second)
		must(t, stop())
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("%d messages never handled", len(left))
		}
		if d := done.get(); len(d) != total {
			dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
			must(t, err)
			t.Fatalf("handled %d distinct messages, want %d; dead letters %+v", len(d), total, dead)
		}
	})
}

func TestLoopWakesWhenAnotherConsumersLeaseExpires(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		// Another consumer claims the message and dies without settling.
		seq := e.send("orphan")[0]
		msgs, err := e.st.Receive(ctx, "q", mqlite.ReceiveOptions{})
		must(t, err)
		if len(msgs) != 1 {
			t.Fatalf("claimed %d", len(msgs))
		}
		var counts guarded[[]int]
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			counts.update(func(c []int) []int { return append(c, m.DeliveryCount) })
			return nil
		}, consumer.LoopConfig{})
		advance(lease - time.Millisecond)
		if c := counts.get(); len(c) != 0 {
			t.Fatalf("handled %v while the other lease ran", c)
		}
		advance(time.Millisecond) // the lease ends: the waiting Loop's timer fires now
		if c := counts.get(); !slices.Equal(c, []int{2}) {
			t.Fatalf("delivery counts %v at the lease's end, want [2]", c)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("completed %d", seq))
		must(t, stop())
	})
}

func TestLoopReportsLockLostAtSettlement(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		// Renewals fail (the broker is unreachable) until the lease is
		// over; the handler then succeeds, and the Complete finds the
		// lock lost: reported, not retried, the message redelivered.
		src := &failingRenewals{Store: e.st}
		src.fail.Store(true)
		e.src = &countingStore{Store: src}
		release := make(chan struct{})
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			if m.DeliveryCount == 1 {
				<-release
			}
			return nil
		}, consumer.LoopConfig{Concurrency: 1, Prefetch: -1})
		seq := e.send("x")[0]
		synctest.Wait()
		advance(lease)
		close(release)
		synctest.Wait()
		got := e.obs.list()
		if len(got) < 2 || got[1] != fmt.Sprintf("lock lost %d", seq) || !errors.Is(e.obs.causeAt(1), mqlite.ErrLockLost) {
			t.Fatalf("events %q", got)
		}
		// The lease had ended: the message comes again and is completed.
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("lock lost %d", seq), "received 1", fmt.Sprintf("completed %d", seq))
		must(t, stop())
	})
}

// TestLoopRetriesAtTheBackoff: with the jitter off a failed message comes
// back exactly Backoff.Delay after its failure, with every background loop
// of the store off: the due moment itself wakes Loop's Receive, no sweep
// tick does.
func TestLoopRetriesAtTheBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
			ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
		})
		must(t, err)
		defer st.Close()
		must(t, st.CreateQueue(ctx, "q", mqlite.QueueOptions{}))
		e := &loopEnv{t: t, st: st, src: &countingStore{Store: st}, obs: &recorder{}, log: &bytes.Buffer{}}
		var at []time.Duration
		start := time.Now()
		done := make(chan struct{})
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			at = append(at, time.Since(start))
			if m.DeliveryCount < 3 {
				return errors.New("not yet")
			}
			close(done)
			return nil
		}, consumer.LoopConfig{Backoff: consumer.Backoff{Initial: 200 * time.Millisecond, Multiplier: 2, Jitter: -1}})
		e.send("x")
		<-done
		must(t, stop())
		want := []time.Duration{0, 200 * time.Millisecond, 600 * time.Millisecond}
		if !slices.Equal(at, want) {
			t.Fatalf("deliveries at %v, want %v", at, want)
		}
	})
}

// TestLoopProgrammingErrorStops: a handler whose error says the code is
// wrong (here a store call with the context of a transaction it holds,
// mqlite.ErrInsideTx) is not retried: its message is dead-lettered on the
// first delivery with the error as its reason, and Loop stops with the
// error; the other message is left untouched.
func TestLoopProgrammingErrorStops(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		calls := 0
		stop := e.start(func(context.Context, mqlite.Message) error {
			calls++
			return fmt.Errorf("send the receipt: %w", mqlite.ErrInsideTx)
		}, consumer.LoopConfig{Prefetch: -1, Backoff: exact})
		seqs := e.send("a", "b")
		synctest.Wait()
		if err := stop(); !errors.Is(err, mqlite.ErrInsideTx) {
			t.Fatalf("Loop returned %v, want mqlite.ErrInsideTx", err)
		}
		if calls != 1 {
			t.Fatalf("the handler ran %d times, want once", calls)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("rejected %d", seqs[0]))
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		if len(dead) != 1 || !strings.Contains(dead[0].DeadLetterReason, mqlite.ErrInsideTx.Error()) || dead[0].DeliveryCount != 1 {
			t.Fatalf("dead letters %+v, want %d, with ErrInsideTx's reason, on its first delivery", dead, seqs[0])
		}
		if m := e.peek()[seqs[1]]; m.DeliveryCount != 0 {
			t.Fatalf("message %d delivered %d times after the stop, want 0", seqs[1], m.DeliveryCount)
		}
	})
}

// TestLoopRetryAfterPastMaxDelay: a handler's RetryAfter past
// mqlite.MaxDelay (a far side's Retry-After of years) abandons the message
// for MaxDelay, where the store refused the abandon as invalid and the
// message came back at each lease's end, its handler run again (fails
// before: the handler ran 3 times in two leases).
func TestLoopRetryAfterPastMaxDelay(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		var calls atomic.Int64
		stop := e.start(func(context.Context, mqlite.Message) error {
			calls.Add(1)
			return consumer.RetryAfter(errors.New("throttled"), 10*mqlite.MaxDelay)
		}, consumer.LoopConfig{Backoff: exact})
		seq := e.send("a")[0]
		synctest.Wait()
		advance(2 * lease)
		must(t, stop())
		if n := calls.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want once", n)
		}
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("abandoned %d", seq))
		if m := e.peek()[seq]; m.State != mqlite.StateScheduled {
			t.Fatalf("message left %q, want scheduled", m.State)
		}
	})
}
