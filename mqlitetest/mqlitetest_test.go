package mqlitetest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

var ctx = context.Background()

type EmailArgs struct {
	To     string `json:"to"`
	UserID int    `json:"user_id"`
}

func (EmailArgs) Kind() string { return "email" }

// fakeT records the failure of an assertion.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs fn with a fakeT and returns its failure ("" for none).
func fails(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func setup(t *testing.T) *mqlite.Store {
	t.Helper()
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	for _, q := range []string{"orders", jobs.DefaultQueue} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// RequireSent finds a message inside the transaction that sent it and
// after the commit; a miss fails with the queue's messages and a diff.
func TestRequireSent(t *testing.T) {
	st := setup(t)
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{Body: []byte(`{"id":1,"item":"book"}`),
			Subject: "order.placed", Properties: map[string]string{"tenant": "a"}})
		if err != nil {
			return err
		}
		mqlitetest.RequireSent(t, tx.SQL(), "orders", mqlitetest.Sent{Subject: "order.placed"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mqlitetest.RequireSent(t, st.DB(), "orders", mqlitetest.Sent{Body: []byte(`{"id":1,"item":"book"}`), Properties: map[string]string{"tenant": "a"}})
	if m.Subject != "order.placed" {
		t.Fatalf("%+v", m)
	}
	msg := fails(t, func(tb testing.TB) {
		mqlitetest.RequireSent(tb, st.DB(), "orders", mqlitetest.Sent{Body: []byte(`{"id":1,"item":"pen"}`), Subject: "order.placed"})
	})
	for _, want := range []string{`no message of queue "orders" matches`, "found 1:", `-   "item": "pen"`, `+   "item": "book"`, `+ property tenant: "a"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure lacks %q:\n%s", want, msg)
		}
	}
}

// RequireInserted finds a job of a kind by its arguments; a miss shows the
// jobs of the kind with a diff of the arguments.
func TestRequireInserted(t *testing.T) {
	st := setup(t)
	for _, a := range []EmailArgs{{To: "ada", UserID: 1}, {To: "bob", UserID: 2}} {
		if _, err := jobs.Insert(ctx, st.DB(), a, nil); err != nil {
			t.Fatal(err)
		}
	}
	m := mqlitetest.RequireInserted(t, st.DB(), EmailArgs{To: "ada", UserID: 1}, nil)
	if m.Properties[jobs.PropKind] != "email" {
		t.Fatalf("%+v", m)
	}
	msg := fails(t, func(tb testing.TB) { mqlitetest.RequireInserted(tb, st.DB(), EmailArgs{To: "bob", UserID: 3}, nil) })
	for _, want := range []string{`no job of kind "email" in queue "jobs" has the arguments`, "found 2:", `-   "user_id": 3`, `+   "user_id": 2`, `    "to": "bob",`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure lacks %q:\n%s", want, msg)
		}
	}
	msg = fails(t, func(tb testing.TB) {
		mqlitetest.RequireInserted(tb, st.DB(), EmailArgs{}, &jobs.InsertOpts{Queue: "orders"})
	})
	if !strings.Contains(msg, `no job of kind "email" in queue "orders"`) {
		t.Fatalf("failure %q", msg)
	}
}

func TestDiff(t *testing.T) {
	got := mqlitetest.Diff("a\nb\nc", "a\nx\nc\nd")
	want := "  a\n- b\n+ x\n  c\n+ d\n"
	if got != want {
		t.Fatalf("diff\n%s\nwant\n%s", got, want)
	}
}

// WorkUntilIdle works what is due, leaves what is scheduled later, and
// fails on a queue that does not exist.
func TestWorkUntilIdle(t *testing.T) {
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	if err := st.CreateQueue(ctx, jobs.DefaultQueue, mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{{}, clock.Now().Add(time.Hour)} {
		if _, err := jobs.Insert(ctx, st.DB(), EmailArgs{To: "x"}, &jobs.InsertOpts{ScheduledAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	var worked atomic.Int32
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { worked.Add(1); return nil }))
	mqlitetest.WorkUntilIdle(t, st, w, consumer.LoopConfig{})
	if n := worked.Load(); n != 1 {
		t.Fatalf("%d worked before the hour, want 1", n)
	}
	clock.Advance(time.Hour)
	mqlitetest.WorkUntilIdle(t, st, w, consumer.LoopConfig{})
	if n := worked.Load(); n != 2 {
		t.Fatalf("%d worked after the hour, want 2", n)
	}
	msg := fails(t, func(tb testing.TB) { mqlitetest.WorkUntilIdle(tb, st, w, consumer.LoopConfig{}, "nope") })
	if !strings.Contains(msg, `queue "nope"`) {
		t.Fatalf("failure %q", msg)
	}
}
