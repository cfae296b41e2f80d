package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of consumer.CompleteWith over the client, from its
// doc comment: a reply lost after the broker committed is either hidden
// (nil, one effect) or ErrOutcomeUnknown, and the same call again commits
// nothing twice.

// dropReplies is a RoundTripper that lets the broker handle each commit
// request, reads its answer whole, then loses it (a connection reset) for
// the first drop commit requests.
type dropReplies struct {
	next    http.RoundTripper
	drop    atomic.Int64
	dropped atomic.Int64
	onDrop  func(dropped int64) // when set, called after each lost reply
}

func (d *dropReplies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/v1/commit") || d.drop.Add(-1) < 0 {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := d.dropped.Add(1); d.onDrop != nil {
		d.onDrop(n)
	}
	return nil, errors.New("test: connection reset after the broker answered")
}

func outsideSetup(t *testing.T, drop int64, maxElapsed time.Duration) (*testdb.Bundle, *client.Client, *dropReplies) {
	t.Helper()
	t.Parallel()
	b := testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
	b.Queue(t, "out", mqlite.QueueOptions{})
	url, key := serve(t, b, broker.Config{})
	d := &dropReplies{next: http.DefaultTransport}
	d.drop.Store(drop)
	c, err := client.New(client.Config{URL: url, Key: key, Clock: b.Clock, MaxElapsed: maxElapsed,
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond,
		HTTPClient: &http.Client{Transport: d}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := outbox.Send(ctx, b.Store, "q", outbox.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	return b, c, d
}

func onward(t *testing.T, b *testdb.Bundle) int64 {
	t.Helper()
	s, err := b.Store.Stats(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	return s.Active
}

func step(ctx context.Context, tx consumer.Tx) error {
	return tx.Send(ctx, "out", outbox.Message{Body: []byte("onward")})
}

// One reply lost, retries allowed: CompleteWith retries under its key and
// answers nil, with one effect; the same call again is nil too (a replay).
func TestOutsideCompleteWithDroppedReply(t *testing.T) {
	b, c, d := outsideSetup(t, 1, 5*time.Second)
	msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	err = consumer.CompleteWith(ctx, c, msgs[0].Lock(), step)
	t.Logf("replies dropped: %d; CompleteWith: %v", d.dropped.Load(), err)
	if d.dropped.Load() != 1 {
		t.Fatalf("dropped %d replies, want 1: the test did not exercise a lost reply", d.dropped.Load())
	}
	if err != nil && !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("CompleteWith after a lost reply: %v, want nil or ErrOutcomeUnknown", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages, want 1", n)
	}
	if err := consumer.CompleteWith(ctx, c, msgs[0].Lock(), step); err != nil {
		t.Fatalf("the same CompleteWith again: %v, want nil (a replay)", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages after the retry, want 1", n)
	}
}

// Every reply lost and no retries (MaxElapsed -1): the commit went through,
// so CompleteWith must say the outcome is unknown, not that the broker is
// unavailable; the same call again answers nil with one effect.
func TestOutsideCompleteWithNoRetryOutcomeUnknown(t *testing.T) {
	b, c, d := outsideSetup(t, 1, -1)
	msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	err = consumer.CompleteWith(ctx, c, msgs[0].Lock(), step)
	t.Logf("replies dropped: %d; CompleteWith: %v", d.dropped.Load(), err)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("CompleteWith with its only reply lost: %v, want ErrOutcomeUnknown", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages, want 1 (the broker handled the commit)", n)
	}
	for i := range 3 {
		if err := consumer.CompleteWith(ctx, c, msgs[0].Lock(), step); err != nil {
			t.Fatalf("retry %d: %v, want nil (a replay)", i, err)
		}
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages after the retries, want 1", n)
	}
	// A different step for the same lock commits nothing: already settled.
	other := func(ctx context.Context, tx consumer.Tx) error {
		return tx.Send(ctx, "out", outbox.Message{Body: []byte("another")})
	}
	if err := consumer.CompleteWith(ctx, c, msgs[0].Lock(), other); !errors.Is(err, mqlite.ErrAlreadySettled) {
		t.Fatalf("another step for the settled lock: %v, want ErrAlreadySettled", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages, want 1", n)
	}
}

// The ctx ends while the retries find no answer: ErrOutcomeUnknown (with
// ctx's error), and a retry on a fresh ctx is safe.
func TestOutsideCompleteWithCtxEndsOutcomeUnknown(t *testing.T) {
	b, c, d := outsideSetup(t, 1<<30, 5*time.Second)
	msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.onDrop = func(n int64) {
		if n == 3 {
			cancel()
		}
	}
	err = consumer.CompleteWith(cctx, c, msgs[0].Lock(), step)
	t.Logf("replies dropped: %d; CompleteWith: %v", d.dropped.Load(), err)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("CompleteWith, replies lost until ctx ended: %v, want ErrOutcomeUnknown", err)
	}
	d.drop.Store(0)
	if err := consumer.CompleteWith(ctx, c, msgs[0].Lock(), step); err != nil {
		t.Fatalf("retry: %v, want nil", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages, want 1", n)
	}
}

// The reply is lost and the lease lapses before the retry (a slow network,
// a paused process): the retry still answers from the commit that went
// through, never ErrLockLost for a message that moved, nor a second effect;
// another consumer that claims the message after the lapse finds nothing.
func TestOutsideCompleteWithLostReplyPastLease(t *testing.T) {
	b, c, d := outsideSetup(t, 1, 5*time.Second)
	msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	d.onDrop = func(int64) { b.Clock.Advance(2 * lease) }
	err = consumer.CompleteWith(ctx, c, msgs[0].Lock(), step)
	t.Logf("replies dropped: %d; CompleteWith: %v", d.dropped.Load(), err)
	if d.dropped.Load() != 1 {
		t.Fatalf("dropped %d replies, want 1", d.dropped.Load())
	}
	if err != nil {
		t.Fatalf("CompleteWith, its reply lost and its lease lapsed: %v, want nil (the commit went through)", err)
	}
	if n := onward(t, b); n != 1 {
		t.Fatalf("%d onward messages, want 1", n)
	}
	again, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(again) != 0 {
		t.Fatalf("a receive after the lapse: %d messages, %v, want none (the message was completed)", len(again), err)
	}
}
