package mqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestPauseHoldsAcrossARestart: a paused queue accepts sends and hands out
// nothing, its pause survives closing and opening the file, and resuming
// hands the messages out; unknown and invalid names are refused.
func TestPauseHoldsAcrossARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mq.db")
	tb := testdb.OpenPath(t, path, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	ctx := context.Background()
	if err := tb.Store.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	pausedAt := tb.Clock.Now()
	tb.Clock.Advance(time.Minute)
	if err := tb.Store.PauseQueue(ctx, "q"); err != nil { // again: keeps the first moment
		t.Fatal(err)
	}
	sendCommitted(t, tb.Store, "q", outbox.Message{Body: []byte("held")})
	if got, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10}); err != nil || len(got) != 0 {
		t.Fatalf("receive while paused: %d messages, %v", len(got), err)
	}
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	tb = testdb.OpenPath(t, path, mqlite.Config{Clock: tb.Clock})
	q := getQueue(t, tb.Store, "q")
	if !q.Paused() || !q.PausedAt.Equal(pausedAt) {
		t.Fatalf("after a restart: paused %v at %v, want at %v", q.Paused(), q.PausedAt, pausedAt)
	}
	ms, err := tb.Store.Metrics(ctx)
	if err != nil || len(ms) != 1 || !ms[0].Paused {
		t.Fatalf("metrics after a restart: %+v %v", ms, err)
	}
	if got, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10}); err != nil || len(got) != 0 {
		t.Fatalf("receive while paused, after a restart: %d messages, %v", len(got), err)
	}
	if err := tb.Store.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if q := getQueue(t, tb.Store, "q"); q.Paused() {
		t.Fatal("still paused after ResumeQueue")
	}
	if got, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10}); err != nil || len(got) != 1 {
		t.Fatalf("receive after resume: %d messages, %v", len(got), err)
	}
	for _, tc := range []struct {
		name string
		want error
	}{{"nope", mqlite.ErrQueueNotFound}, {"bad name!", mqlite.ErrInvalidArgument}} {
		if err := tb.Store.PauseQueue(ctx, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("pause %q: %v, want %v", tc.name, err, tc.want)
		}
		if err := tb.Store.ResumeQueue(ctx, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("resume %q: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestResumeWakesAWaitingReceive: a long-poll on a paused queue that holds a
// message waits, and the resume hands it the message at once (its wait is
// far longer than the test, and nothing else commits to wake it).
func TestResumeWakesAWaitingReceive(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	ctx := context.Background()
	sendCommitted(t, tb.Store, "q", outbox.Message{Body: []byte("m")})
	if err := tb.Store.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	got := make(chan []mqlite.Message, 1)
	go func() {
		msgs, err := tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	eventually(t, "the receive waits", func() bool {
		rs := receiversOf(t, tb.Store, "q")
		return len(rs) == 1 && rs[0].Waiting == 1
	})
	if err := tb.Store.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if msgs := <-got; len(msgs) != 1 {
		t.Fatalf("after resume: %d messages", len(msgs))
	}
}
