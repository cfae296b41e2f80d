package mqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/notify"
	"github.com/mqlite/mqlite/outbox"
)

// wakeStore opens a store inside a synctest bubble (the system clock is
// fake there and moves only when every goroutine waits) with every
// background loop off, so that nothing but Receive's own wake-ups can hand
// a message out at its due moment.
func wakeStore(t *testing.T, dir string, q mqlite.QueueOptions) *mqlite.Store {
	t.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(dir, "mq.db"), mqlite.Config{
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(context.Background(), "q", q); err != nil {
		t.Fatal(err)
	}
	return st
}

func sendTx(t *testing.T, st *mqlite.Store, msgs ...outbox.Message) {
	t.Helper()
	_, err := outbox.Send(context.Background(), st, "q", msgs...)
	if err != nil {
		t.Fatal(err)
	}
}

// receiveAsync starts a Receive with a long Wait and returns its outcome
// and the fake time it took.
func receiveAsync(st *mqlite.Store, wait time.Duration) <-chan receiveResult {
	out := make(chan receiveResult, 1)
	start := time.Now()
	go func() {
		msgs, err := st.Receive(context.Background(), "q", mqlite.ReceiveOptions{Wait: wait})
		out <- receiveResult{msgs, err, time.Since(start)}
	}()
	return out
}

type receiveResult struct {
	msgs []mqlite.Message
	err  error
	took time.Duration
}

// TestReceiveWakesAtDueMoments: a waiting Receive returns at the moment a
// message becomes claimable without another commit (a DeliverAt, a lease
// end, an Abandon delay committed while it already waits), with every
// background loop off: it never waits for a sweep's tick or for Wait's end.
func TestReceiveWakesAtDueMoments(t *testing.T) {
	t.Parallel()
	const lease, wait = 300 * time.Millisecond, 10 * time.Second
	for _, tc := range []struct {
		name string
		// arrange prepares the queue and returns the moment (from its
		// return) at which the waiting Receive must get a message.
		arrange func(t *testing.T, st *mqlite.Store, waiting func()) time.Duration
	}{
		{"deliver at", func(t *testing.T, st *mqlite.Store, waiting func()) time.Duration {
			sendTx(t, st, outbox.Message{Body: []byte("x"), DeliverAt: time.Now().Add(lease)})
			waiting()
			return lease
		}},
		{"lease end", func(t *testing.T, st *mqlite.Store, waiting func()) time.Duration {
			sendTx(t, st, outbox.Message{Body: []byte("x")})
			if _, err := st.Receive(context.Background(), "q", mqlite.ReceiveOptions{}); err != nil {
				t.Fatal(err)
			}
			waiting()
			return lease
		}},
		{"abandon delay committed while waiting", func(t *testing.T, st *mqlite.Store, waiting func()) time.Duration {
			if err := st.UpdateQueue(context.Background(), "q", mqlite.QueueOptions{LockDuration: time.Hour}); err != nil {
				t.Fatal(err)
			}
			sendTx(t, st, outbox.Message{Body: []byte("x")})
			got, err := st.Receive(context.Background(), "q", mqlite.ReceiveOptions{})
			if err != nil || len(got) != 1 {
				t.Fatalf("receive: %v %v", got, err)
			}
			waiting() // planned to wake at Wait's end: the lease outlasts it
			if err := st.Abandon(context.Background(), got[0].Lock(), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			return 200 * time.Millisecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				st := wakeStore(t, dir, mqlite.QueueOptions{LockDuration: lease})
				var res <-chan receiveResult
				var from time.Time
				due := tc.arrange(t, st, func() {
					res = receiveAsync(st, wait)
					synctest.Wait() // the receiver sleeps
				})
				from = time.Now()
				r := <-res
				if r.err != nil || len(r.msgs) != 1 {
					t.Fatalf("receive: %v %v, want the message", r.msgs, r.err)
				}
				if late := time.Since(from) - due; late < 0 || late > 5*time.Millisecond {
					t.Fatalf("returned %v after the due moment, want at it", late)
				}
			})
		})
	}
}

// TestReceiveWakesOnCommitNotRollback: a rolled-back send wakes no waiting
// receiver; the next committed one does, at once.
func TestReceiveWakesOnCommitNotRollback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		st := wakeStore(t, dir, mqlite.QueueOptions{})
		res := receiveAsync(st, time.Minute)
		synctest.Wait()
		rollback := errors.New("roll back")
		err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("no")}); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("a rollback woke the receiver: %v %v", r.msgs, r.err)
		default:
		}
		start := time.Now()
		sendTx(t, st, outbox.Message{Body: []byte("yes")})
		r := <-res
		if r.err != nil || len(r.msgs) != 1 || string(r.msgs[0].Body) != "yes" || time.Since(start) != 0 {
			t.Fatalf("after the commit: %v %v after %v, want yes at once", r.msgs, r.err, time.Since(start))
		}
	})
}

// TestReceiveInterrupted: a Receive whose ctx carries an interrupt
// (notify.WithInterrupt, as the broker's streams use) returns no messages
// and no error at once when it yields while the Receive sleeps, and claims
// nothing; a yield before the Receive does not stop its claim.
func TestReceiveInterrupted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		st := wakeStore(t, dir, mqlite.QueueOptions{})
		interrupt := make(chan struct{}, 1)
		ictx := notify.WithInterrupt(context.Background(), interrupt)
		out := make(chan receiveResult, 1)
		go func() {
			start := time.Now()
			msgs, err := st.Receive(ictx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
			out <- receiveResult{msgs, err, time.Since(start)}
		}()
		synctest.Wait()
		interrupt <- struct{}{}
		r := <-out
		if r.err != nil || len(r.msgs) != 0 || r.took != 0 {
			t.Fatalf("interrupted: %v %v after %v, want nothing at once", r.msgs, r.err, r.took)
		}
		sendTx(t, st, outbox.Message{Body: []byte("m")})
		interrupt <- struct{}{} // pending: the claim comes first
		msgs, err := st.Receive(ictx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
		if err != nil || len(msgs) != 1 || msgs[0].DeliveryCount != 1 {
			t.Fatalf("receive with an interrupt pending: %v %v, want the message", msgs, err)
		}
	})
}
