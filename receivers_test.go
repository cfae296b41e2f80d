package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// eventually polls cond until it holds; the deadline is far past any
// machine's load, for a state that needs another goroutine to get there.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// receiversOf returns the live receivers of queue.
func receiversOf(t *testing.T, st *mqlite.Store, queue string) []mqlite.Receiver {
	t.Helper()
	all, err := st.Receivers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []mqlite.Receiver
	for _, r := range all {
		if r.Queue == queue {
			out = append(out, r)
		}
	}
	return out
}

// TestReceiversFollowLoops: each consumer.Loop is one receiver while it
// runs, waiting or holding the lease of the message its handler works on;
// a stopped loop leaves after ReceiverGrace by the store's clock; Metrics
// counts the consumers, waiting receives and locks per queue.
func TestReceiversFollowLoops(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Minute})
	st := tb.Store
	start := func(h consumer.Handler) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- consumer.Loop(ctx, st, "q", h, consumer.LoopConfig{Concurrency: 1, Prefetch: -1}) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("loop: %v", err)
			}
		}
	}
	count := func() int { return len(receiversOf(t, st, "q")) }

	working, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, m mqlite.Message) error {
		close(working) // one message is sent
		<-release
		return nil
	}
	stopA := start(hold)
	eventually(t, "loop A waiting", func() bool {
		rs := receiversOf(t, st, "q")
		return len(rs) == 1 && rs[0].Waiting == 1
	})
	stopB := start(hold)
	eventually(t, "two loops", func() bool { return count() == 2 })
	sendCommitted(t, st, "q", outbox.Message{Body: []byte("work")})
	<-working
	eventually(t, "one lock held", func() bool {
		held := 0
		for _, r := range receiversOf(t, st, "q") {
			held += r.Locks
		}
		return held == 1
	})
	ms, err := st.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m := ms[0]; m.Consumers != 2 || m.Locks != 1 {
		t.Fatalf("metrics: %d consumers, %d locks, want 2 and 1", m.Consumers, m.Locks)
	}
	close(release)
	stopB()
	stopA()
	if n := count(); n != 2 {
		t.Fatalf("%d receivers right after the loops stopped, want 2 (within the grace)", n)
	}
	tb.Clock.Advance(mqlite.ReceiverGrace)
	if rs := receiversOf(t, st, "q"); len(rs) != 0 {
		t.Fatalf("after the grace: %+v", rs)
	}
}

// TestReceiversByTag: a tagged Receive counts under its tag, an untagged one
// under "in-process"; a completed delivery no longer counts as a lock, a
// deleted queue's receivers are gone.
func TestReceiversByTag(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	st, ctx := tb.Store, context.Background()
	sendCommitted(t, st, "q", outbox.Message{Body: []byte("a")})
	sendCommitted(t, st, "q", outbox.Message{Body: []byte("b")})
	tag := mqlite.ReceiverTag{Name: "c1", KeyID: "k1", Addr: "10.0.0.1"}
	got, err := st.Receive(mqlite.WithReceiver(ctx, tag), "q", mqlite.ReceiveOptions{Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %d", err, len(got))
	}
	if _, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1}); err != nil {
		t.Fatal(err)
	}
	rs := receiversOf(t, st, "q")
	if len(rs) != 2 || rs[0].Name != "in-process" || rs[0].Locks != 1 || rs[1].ReceiverTag != tag || rs[1].Locks != 1 {
		t.Fatalf("receivers: %+v", rs)
	}
	if err := st.Complete(ctx, got[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if rs := receiversOf(t, st, "q"); len(rs) != 2 || rs[1].Locks != 0 {
		t.Fatalf("after complete: %+v", rs)
	}
	if err := st.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if rs := receiversOf(t, st, "q"); len(rs) != 0 {
		t.Fatalf("after delete: %+v", rs)
	}
}

// TestReceiversArePrunedAsTimePasses: the store's reaper forgets the
// receivers gone (past ReceiverGrace, no wait, no lease) and the lapsed
// leases, so that the registry does not grow until something lists it;
// the control shows the grace still keeps them before it ends. Only
// Receivers pruned it: receivers that came and went were kept for as long
// as nobody listed them.
func TestReceiversArePrunedAsTimePasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	const n = 50
	if _, err := outbox.Send(ctx, tb.Store, "q", outbox.Message{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		rctx := mqlite.WithReceiver(ctx, mqlite.ReceiverTag{Name: fmt.Sprint("r", i)})
		if _, err := tb.Store.Receive(rctx, "q", mqlite.ReceiveOptions{Max: 1}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name             string
		advance          time.Duration
		wantLive, wantLk int
	}{
		{"within the grace and the lease", 0, n, 1},
		{"past the grace and the lease", mqlite.DefaultLockDuration + mqlite.ReceiverGrace, 0, 0},
	}
	for _, tc := range tests {
		tb.Clock.Advance(tc.advance)
		if _, err := mqlite.RunSweeps(ctx, tb.Store); err != nil {
			t.Fatal(err)
		}
		if live, locks := mqlite.ReceiversKept(tb.Store); live != tc.wantLive || locks != tc.wantLk {
			t.Errorf("%s: the registry keeps %d receivers and %d leases, want %d and %d", tc.name, live, locks, tc.wantLive, tc.wantLk)
		}
	}
}

// TestReceiversKeepLockOnWrongSeq: a settlement with the delivery's token
// but another seq is ErrLockLost and releases nothing, so the receiver still
// counts the lock it holds; the right lock then releases it.
func TestReceiversKeepLockOnWrongSeq(t *testing.T) {
	t.Parallel()
	type settleFunc func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error
	one := func(err error, errs []error) error {
		if err != nil {
			return err
		}
		return errs[0]
	}
	cases := []struct {
		name   string
		settle settleFunc
	}{
		{"Complete", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Complete(ctx, l) }},
		{"Abandon", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Abandon(ctx, l, 0) }},
		{"AbandonWithReason", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			return st.AbandonWithReason(ctx, l, 0, "why")
		}},
		{"Reject", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Reject(ctx, l, "r", "d") }},
		{"Defer", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Defer(ctx, l) }},
		{"CompleteBatch", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			errs, err := st.CompleteBatch(ctx, []mqlite.Lock{l})
			return one(err, errs)
		}},
		{"CompleteAndReceive", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			errs, _, err := st.CompleteAndReceive(ctx, l.Queue, []mqlite.Lock{l}, mqlite.ReceiveOptions{})
			return one(err, errs)
		}},
		{"Renew", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			_, err := st.Renew(ctx, l)
			return err
		}},
		// Inside the caller's transaction, committed whatever the
		// settlement answered: the commit forgets only what it released.
		{"CompleteTx", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			var settled error
			err := st.Tx(ctx, func(tx *mqlite.Tx) error {
				settled = consumer.CompleteTx(tx.Context(), tx.SQL(), l)
				return nil
			})
			return errors.Join(err, settled)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := testdb.Open(t, mqlite.Config{})
			tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Minute})
			st, ctx := tb.Store, context.Background()
			sendCommitted(t, st, "q", outbox.Message{Body: []byte("a")})
			got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{})
			if err != nil || len(got) != 1 {
				t.Fatalf("receive: %v %d", err, len(got))
			}
			locks := func() int {
				rs := receiversOf(t, st, "q")
				if len(rs) != 1 {
					t.Fatalf("receivers: %+v", rs)
				}
				return rs[0].Locks
			}
			wrong := got[0].Lock()
			wrong.Seq += 1000
			if err := tc.settle(ctx, st, wrong); !errors.Is(err, mqlite.ErrLockLost) {
				t.Fatalf("wrong seq: %v, want ErrLockLost", err)
			}
			if n := locks(); n != 1 {
				t.Fatalf("after a wrong seq: %d locks, want 1 (the message is still locked)", n)
			}
			if tc.name == "Renew" {
				return // a renewal keeps the lease
			}
			if err := tc.settle(ctx, st, got[0].Lock()); err != nil {
				t.Fatal(err)
			}
			if n := locks(); n != 0 {
				t.Fatalf("after the right lock: %d locks, want 0", n)
			}
		})
	}
}
