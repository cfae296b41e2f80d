package mqlite_test

// The store's own checks of Receive and ReceiveDeferred. The peek-lock
// promises every implementation keeps (fencing, receipts, order, attempts,
// the delivery bound, waking) are pinned by the conformance kit.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// openQueue opens a store with queue "q" for a parallel test.
func openQueue(t *testing.T) *testdb.Bundle {
	t.Helper()
	t.Parallel()
	return testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
}

// TestLockTokenHas128Bits: a lock token is 32 hex digits.
func TestLockTokenHas128Bits(t *testing.T) {
	b := openQueue(t)
	b.Send(t, "q", outbox.Message{})
	msgs, err := b.Store.Receive(context.Background(), "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %v", msgs, err)
	}
	if tok := msgs[0].LockToken; len(tok) != 32 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Fatalf("token %q, want 32 hex digits (128 bits)", tok)
	}
}

// TestReceiveBadInput: bad arguments are refused with their sentinel.
func TestReceiveBadInput(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		queue string
		opts  mqlite.ReceiveOptions
		want  error
	}{
		{"empty queue", "", mqlite.ReceiveOptions{}, mqlite.ErrInvalidQueueName},
		{"unknown queue", "nope", mqlite.ReceiveOptions{}, mqlite.ErrQueueNotFound},
		{"negative max", "q", mqlite.ReceiveOptions{Max: -1}, mqlite.ErrInvalidArgument},
		{"huge max", "q", mqlite.ReceiveOptions{Max: 1001}, mqlite.ErrInvalidArgument},
		{"negative wait", "q", mqlite.ReceiveOptions{Wait: -1}, mqlite.ErrInvalidArgument},
		{"bad mode", "q", mqlite.ReceiveOptions{Mode: 7}, mqlite.ErrInvalidArgument},
	} {
		if _, err := b.Store.Receive(ctx, tc.queue, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, l := range []mqlite.Lock{{Queue: "q", Seq: 0, Token: "t"}, {Queue: "q", Seq: 1}, {Seq: 1, Token: "t"}} {
		if err := b.Store.Complete(ctx, l); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("Complete(%+v): %v, want ErrInvalidArgument", l, err)
		}
	}
	if err := b.Store.Abandon(ctx, mqlite.Lock{Queue: "q", Seq: 1, Token: "t"}, -time.Second); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("negative delay: %v, want ErrInvalidArgument", err)
	}
}

// TestReceiveDeferredClaimsOnlyADeferredMessage: ReceiveDeferred of a seq
// that is not deferred (unknown, or claimed already) is
// ErrMessageNotFound; a deferred one comes with a new token and counts a
// delivery.
func TestReceiveDeferredClaimsOnlyADeferredMessage(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	seq := b.Send(t, "q", outbox.Message{})[0]
	msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %v", msgs, err)
	}
	if err := b.Store.Defer(ctx, msgs[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.ReceiveDeferred(ctx, "q", seq+100); !errors.Is(err, mqlite.ErrMessageNotFound) {
		t.Fatalf("unknown seq: %v, want ErrMessageNotFound", err)
	}
	d, err := b.Store.ReceiveDeferred(ctx, "q", seq)
	if err != nil {
		t.Fatal(err)
	}
	if d.DeliveryCount != 2 || d.LockToken == "" || d.LockToken == msgs[0].LockToken {
		t.Fatalf("deferred delivery %+v", d)
	}
	if _, err := b.Store.ReceiveDeferred(ctx, "q", seq); !errors.Is(err, mqlite.ErrMessageNotFound) {
		t.Fatalf("second ReceiveDeferred: %v, want ErrMessageNotFound (it is locked)", err)
	}
}

// TestCloseEndsAWaitingReceive: Close ends a Receive that waits, with
// ErrClosed.
func TestCloseEndsAWaitingReceive(t *testing.T) {
	b := openQueue(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.Store.Receive(context.Background(), "q", mqlite.ReceiveOptions{Wait: time.Hour})
		done <- err
	}()
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("the waiting Receive: %v, want ErrClosed", err)
	}
}
