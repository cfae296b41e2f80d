package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

const handoffLease = 30 * time.Second

func handoffSetup(t *testing.T, opts mqlite.QueueOptions) *testdb.Bundle {
	t.Helper()
	t.Parallel()
	opts.LockDuration = handoffLease
	return testdb.OpenQueue(t, "q", opts)
}

// peekOne returns the one message of queue q, by Peek.
func peekOne(t *testing.T, st *mqlite.Store) mqlite.Message {
	t.Helper()
	msgs, err := st.Peek(context.Background(), "q", mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("peek: %d messages, %v; want 1", len(msgs), err)
	}
	return msgs[0]
}

// TestHandoffClaimsInTheSendsCommit: a message sent while a Receive sleeps
// is claimed for it in the send's transaction: when the send returns, the
// message is already locked under the token the Receive gets, delivered
// once, and settles with it; nobody else can claim it. The control: with
// no Receive asleep, the same send leaves the message claimable.
func TestHandoffClaimsInTheSendsCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiting bool
	}{{"a Receive sleeps", true}, {"control: none sleeps", false}} {
		t.Run(tc.name, func(t *testing.T) {
			b := handoffSetup(t, mqlite.QueueOptions{})
			ctx := context.Background()
			var leave func() []mqlite.Message
			if tc.waiting {
				leave = mqlite.WaitHandoff(b.Store, "q", mqlite.ReceiveOptions{Max: 10})
			}
			seq := b.Send(t, "q", outbox.Message{})[0]
			m := peekOne(t, b.Store)
			if !tc.waiting {
				if m.State != mqlite.StateActive {
					t.Fatalf("without a sleeping Receive the message is %s, want active", m.State)
				}
				return
			}
			if m.State != mqlite.StateLocked || m.DeliveryCount != 1 {
				t.Fatalf("after the send: %s, delivery %d; want locked, delivery 1", m.State, m.DeliveryCount)
			}
			if others, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10}); err != nil || len(others) != 0 {
				t.Fatalf("another Receive got %d messages, %v; want none: one claimer", len(others), err)
			}
			got := leave()
			if len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != 1 || !got[0].LockedUntil.Equal(b.Clock.Now().Add(handoffLease)) {
				t.Fatalf("handed %+v; want seq %d, delivery 1, locked for the lease", got, seq)
			}
			if err := b.Store.Complete(ctx, got[0].Lock()); err != nil {
				t.Fatalf("complete the handed message: %v", err)
			}
		})
	}
}

// TestHandoffRollbackHandsNothing: a send whose transaction rolls back,
// before or after the hand-off's claim ran in it, hands nothing over and
// leaves nothing; the Receive sleeps on and gets the next committed send.
func TestHandoffRollbackHandsNothing(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		// end ends fn after its send: its error, or it cancels the
		// transaction's ctx, which rolls back after the claim ran.
		end  func(cancel context.CancelFunc) error
		want error
	}{
		{"fn fails", func(context.CancelFunc) error { return boom }, boom},
		{"ctx ends before the commit", func(cancel context.CancelFunc) error { cancel(); return nil }, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := handoffSetup(t, mqlite.QueueOptions{})
			leave := mqlite.WaitHandoff(b.Store, "q", mqlite.ReceiveOptions{Max: 10})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
				if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("rolled back")}); err != nil {
					return err
				}
				return tc.end(cancel)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Tx: %v, want %v", err, tc.want)
			}
			if n := mqlite.HandoffWaiters(b.Store); n != 1 {
				t.Fatalf("%d Receives registered after the rollback, want 1 still sleeping", n)
			}
			seq := b.Send(t, "q", outbox.Message{Body: []byte("committed")})[0]
			got := leave()
			if len(got) != 1 || got[0].Seq != seq || string(got[0].Body) != "committed" {
				t.Fatalf("handed %+v; want only the committed message %d", got, seq)
			}
			if m := peekOne(t, b.Store); m.Seq != seq {
				t.Fatalf("the queue holds %d, want only %d", m.Seq, seq)
			}
		})
	}
}

// TestHandoffCrashAfterCommit: the hand-off's claim commits with the send;
// a receiver that dies before it has the message loses nothing. While the
// store lives, the message stays locked for its lease and comes back when
// the lease ends; when the store's process dies too (closed with the
// Receive registered, then opened again), the opening gives the orphaned
// lease back. Either way its one delivery is counted. The control: without
// a sleeping Receive the message is claimable at once, at its first
// delivery.
func TestHandoffCrashAfterCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		waiting  bool
		reopen   bool
		within   int // messages a Receive gets inside the lease
		delivery int // the delivery count of the message when it comes back
	}{
		{"the receiver dies", true, false, 0, 2},
		{"the store's process dies too", true, true, 1, 2},
		{"control: not claimed", false, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := handoffSetup(t, mqlite.QueueOptions{})
			ctx := context.Background()
			if tc.waiting {
				_ = mqlite.WaitHandoff(b.Store, "q", mqlite.ReceiveOptions{Max: 10}) // never left: the receiver dies
			}
			seq := b.Send(t, "q", outbox.Message{})[0]
			st, clock := b.Store, b.Clock
			if tc.reopen {
				if err := b.Store.Close(); err != nil {
					t.Fatal(err)
				}
				again := testdb.OpenPath(t, b.Path, mqlite.Config{})
				again.Clock.Set(b.Clock.Now())
				st, clock = again.Store, again.Clock
			}
			got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
			if err != nil || len(got) != tc.within {
				t.Fatalf("inside the lease: %d messages, %v; want %d", len(got), err, tc.within)
			}
			if len(got) == 0 {
				clock.Advance(handoffLease + time.Millisecond)
				if got, err = st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10}); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != tc.delivery {
				t.Fatalf("came back: %+v; want seq %d at delivery %d", got, seq, tc.delivery)
			}
		})
	}
}

// TestHandoffKeepsTheClaimRules: the hand-off claims as a Receive does, so
// a message that a Receive could not take is not handed over: one behind
// a locked message of its group, one of a paused queue. The Receive sleeps
// on, and the message is claimable once its rule lets it.
func TestHandoffKeepsTheClaimRules(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		opts  mqlite.QueueOptions
		block func(t *testing.T, b *testdb.Bundle) (unblock func())
	}{
		{"behind a locked message of its group", mqlite.QueueOptions{Ordering: mqlite.FIFO}, func(t *testing.T, b *testdb.Bundle) func() {
			b.Send(t, "q", outbox.Message{GroupID: "g"})
			first, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
			if err != nil || len(first) != 1 {
				t.Fatalf("receive the first: %d, %v", len(first), err)
			}
			return func() {
				if err := b.Store.Complete(ctx, first[0].Lock()); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"paused queue", mqlite.QueueOptions{}, func(t *testing.T, b *testdb.Bundle) func() {
			if err := b.Store.PauseQueue(ctx, "q"); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := b.Store.ResumeQueue(ctx, "q"); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := handoffSetup(t, tc.opts)
			unblock := tc.block(t, b)
			leave := mqlite.WaitHandoff(b.Store, "q", mqlite.ReceiveOptions{Max: 10})
			seq := b.Send(t, "q", outbox.Message{GroupID: "g"})[0]
			if got := leave(); len(got) != 0 {
				t.Fatalf("handed %d messages the claim rules hold back", len(got))
			}
			unblock()
			got, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
			if err != nil || len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != 1 {
				t.Fatalf("after the rule lets it: %+v, %v; want seq %d at delivery 1", got, err, seq)
			}
		})
	}
}

// TestHandoffToASleepingReceive: a Receive that sleeps with Wait gets the
// message a send commits, claimed by the send's transaction.
func TestHandoffToASleepingReceive(t *testing.T) {
	b := handoffSetup(t, mqlite.QueueOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		msgs []mqlite.Message
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10, Wait: time.Minute})
		got <- answer{msgs, err}
	}()
	for mqlite.HandoffWaiters(b.Store) == 0 { // until the Receive sleeps
		if ctx.Err() != nil {
			t.Fatal("the Receive never slept")
		}
		runtime.Gosched()
	}
	seq := b.Send(t, "q", outbox.Message{})[0]
	if m := peekOne(t, b.Store); m.State != mqlite.StateLocked {
		t.Fatalf("after the send the message is %s, want locked by the hand-off", m.State)
	}
	a := <-got
	if a.err != nil || len(a.msgs) != 1 || a.msgs[0].Seq != seq {
		t.Fatalf("Receive: %+v, %v; want seq %d", a.msgs, a.err, seq)
	}
	if err := b.Store.Complete(ctx, a.msgs[0].Lock()); err != nil {
		t.Fatal(err)
	}
}

const envHandoffKill = "MQLITE_HANDOFF_KILL" // the file of the worker of TestHandoffSIGKILL
const envHandoffWait = "MQLITE_HANDOFF_WAIT" // "1": the worker's Receive sleeps when it sends

// TestHandoffKillWorker is TestHandoffSIGKILL's worker process: it sends
// one message (with a Receive asleep on its queue when asked), reports the
// message's state after the commit, and SIGKILLs itself before anything
// else happens: the receiver never gets the message.
func TestHandoffKillWorker(t *testing.T) {
	path := os.Getenv(envHandoffKill)
	if path == "" {
		t.Skip("runs only as TestHandoffSIGKILL's worker process")
	}
	b := testdb.OpenPath(t, path, mqlite.Config{})
	if os.Getenv(envHandoffWait) == "1" {
		_ = mqlite.WaitHandoff(b.Store, "q", mqlite.ReceiveOptions{Max: 10})
	}
	b.Send(t, "q", outbox.Message{})
	fmt.Printf("state=%s\n", peekOne(t, b.Store).State)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestHandoffSIGKILL: a process killed right after the commit of a send
// that claimed for its sleeping Receive loses nothing: the message was
// locked by the send's commit, and the next opening of the file gives the
// orphaned lease back, its delivery counted. The control: without a
// sleeping Receive the send leaves the message active, and it comes back
// at its first delivery.
func TestHandoffSIGKILL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		wait     string
		state    mqlite.State
		delivery int
	}{
		{"claimed by the send", "1", mqlite.StateLocked, 2},
		{"control: not claimed", "0", mqlite.StateActive, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mq.db")
			func() {
				b := testdb.OpenPath(t, path, mqlite.Config{})
				b.Queue(t, "q", mqlite.QueueOptions{LockDuration: handoffLease})
				if err := b.Store.Close(); err != nil {
					t.Fatal(err)
				}
			}()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHandoffKillWorker$", "-test.count=1")
			cmd.Env = append(os.Environ(), envHandoffKill+"="+path, envHandoffWait+"="+tc.wait)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("worker ended with %v, want its own SIGKILL; output:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "state="+string(tc.state)+"\n") {
				t.Fatalf("worker's output %q: want the message %s after the send", out.String(), tc.state)
			}
			again := testdb.OpenPath(t, path, mqlite.Config{})
			got, err := again.Store.Receive(context.Background(), "q", mqlite.ReceiveOptions{Max: 10})
			if err != nil || len(got) != 1 || got[0].DeliveryCount != tc.delivery {
				t.Fatalf("after the kill: %+v, %v; want the message at delivery %d", got, err, tc.delivery)
			}
		})
	}
}
