package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
)

// errorsOf lists the errors of m's history, oldest first.
func errorsOf(m mqlite.Message) []string {
	var out []string
	for _, a := range m.Attempts {
		out = append(out, a.Error)
	}
	return out
}

// TestAttemptHistoryBound: each failed delivery appends an attempt with its
// error, time (the store's clock) and worker; past Config.AttemptHistory
// the oldest go. A message that never failed has none.
func TestAttemptHistoryBound(t *testing.T) {
	t.Parallel()
	b := &sweepBundle{Bundle: testdb.Open(t, mqlite.Config{AttemptHistory: 3}), t: t}
	ctx := mqlite.WithReceiver(context.Background(), mqlite.ReceiverTag{Name: "w1"})
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 100})
	seq := b.send("q", body("x"))[0]
	if m := b.wantState("q", seq, mqlite.StateActive); m.Attempts != nil {
		t.Fatalf("a message that never failed has attempts %+v", m.Attempts)
	}
	var ats []time.Time
	for i := range 5 {
		m := b.receive("q", 1)[0]
		ats = append(ats, b.Clock.Now())
		if err := b.Store.AbandonWithReason(ctx, m.Lock(), 0, fmt.Sprint("failure ", i)); err != nil {
			t.Fatal(err)
		}
		b.Clock.Advance(time.Second)
	}
	m := b.wantState("q", seq, mqlite.StateActive)
	if got, want := errorsOf(m), []string{"failure 2", "failure 3", "failure 4"}; !slices.Equal(got, want) {
		t.Fatalf("attempts %q, want the last 3 %q", got, want)
	}
	for i, a := range m.Attempts {
		if !a.At.Equal(ats[i+2]) || !strings.HasSuffix(a.Worker, "/w1") {
			t.Errorf("attempt %d: %+v, want at %v by .../w1", i, a, ats[i+2])
		}
	}
	// The claim shows the history too (a worker sees its message's past).
	if r := b.receive("q", 1)[0]; len(r.Attempts) != 3 || r.Attempts[2].Error != "failure 4" {
		t.Fatalf("received attempts %+v", r.Attempts)
	}
}

// TestAttemptHistoryIntoDeadLettersAndBack: a lapsed lease records an
// attempt without a worker; the last allowed failure moves the message to
// the dead letters with its whole history; Redrive keeps it, and the next
// failure appends to it. Release, Defer and a completion record nothing.
func TestAttemptHistoryIntoDeadLettersAndBack(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 3, LockDuration: time.Minute})
	seq := b.send("q", body("x"))[0]
	m := b.receive("q", 1)[0]
	if err := b.Store.Release(ctx, m.Lock()); err != nil {
		t.Fatal(err)
	}
	m = b.receive("q", 1)[0]
	if err := b.Store.Defer(ctx, m.Lock()); err != nil {
		t.Fatal(err)
	}
	if got := b.wantState("q", seq, mqlite.StateDeferred); got.Attempts != nil {
		t.Fatalf("release and defer recorded %+v", got.Attempts)
	}
	if _, err := b.Store.ReceiveDeferred(ctx, "q", seq); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Minute) // the lease lapses
	b.sweepNow()
	m = b.receive("q", 1)[0]
	if len(m.Attempts) != 1 || m.Attempts[0].Error != "the lease expired" || m.Attempts[0].Worker != "" {
		t.Fatalf("after a lapsed lease: %+v", m.Attempts)
	}
	if err := b.Store.Reject(ctx, m.Lock(), "bad", "no lines"); err != nil {
		t.Fatal(err)
	}
	dead := b.wantState("q", seq, mqlite.StateDeadLettered)
	if got, want := errorsOf(dead), []string{"the lease expired", "bad: no lines"}; !slices.Equal(got, want) {
		t.Fatalf("dead letter's attempts %q, want %q", got, want)
	}
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{Seqs: []int64{seq}}); err != nil || n != 1 {
		t.Fatalf("redrive: %d, %v", n, err)
	}
	m = b.receive("q", 1)[0]
	if got := errorsOf(m); len(got) != 2 {
		t.Fatalf("redriven message's attempts %q, want the 2 it had", got)
	}
	if err := b.Store.Abandon(ctx, m.Lock(), 0); err != nil {
		t.Fatal(err)
	}
	if got, want := errorsOf(b.wantState("q", seq, mqlite.StateActive)), []string{"the lease expired", "bad: no lines", ""}; !slices.Equal(got, want) {
		t.Fatalf("after a plain abandon: %q, want %q", got, want)
	}
}

// TestAttemptHistoryOff: a negative AttemptHistory records nothing (the
// last error still is); one past MaxAttemptHistory is refused.
func TestAttemptHistoryOff(t *testing.T) {
	t.Parallel()
	b := &sweepBundle{Bundle: testdb.Open(t, mqlite.Config{AttemptHistory: -1}), t: t}
	b.Queue(t, "q", mqlite.QueueOptions{})
	seq := b.send("q", body("x"))[0]
	if err := b.Store.AbandonWithReason(context.Background(), b.receive("q", 1)[0].Lock(), 0, "boom"); err != nil {
		t.Fatal(err)
	}
	if m := b.wantState("q", seq, mqlite.StateActive); m.Attempts != nil || m.LastError != "boom" {
		t.Fatalf("history off: attempts %+v, last error %q", m.Attempts, m.LastError)
	}
	_, err := mqlite.Open(context.Background(), t.TempDir()+"/x.db", mqlite.Config{AttemptHistory: mqlite.MaxAttemptHistory + 1})
	if !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("AttemptHistory past the bound: %v, want ErrInvalidArgument", err)
	}
}

// TestWorkerOf names the worker of an untagged call, a tagged in-process
// one and a remote one.
func TestWorkerOf(t *testing.T) {
	t.Parallel()
	bare := mqlite.WorkerOf(context.Background())
	if !strings.Contains(bare, ":") || strings.Contains(bare, "/") {
		t.Fatalf("untagged worker %q, want host:pid", bare)
	}
	if got := mqlite.WorkerOf(mqlite.WithReceiver(context.Background(), mqlite.ReceiverTag{Name: "loop-1"})); got != bare+"/loop-1" {
		t.Fatalf("in-process worker %q", got)
	}
	if got := mqlite.WorkerOf(mqlite.WithReceiver(context.Background(), mqlite.ReceiverTag{Name: "c1", Addr: "10.0.0.1", KeyID: "k"})); got != "c1@10.0.0.1" {
		t.Fatalf("remote worker %q", got)
	}
}
