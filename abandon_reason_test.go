package mqlite_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
)

// TestAbandonReasonIsBoundedInBytes: a reason of exactly MaxLastErrorLen
// bytes is kept, in one-byte and in three-byte characters; one byte more,
// or bytes that are not UTF-8, are ErrInvalidArgument and change nothing
// (the delivery stays locked, its last error unset).
func TestAbandonReasonIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	euros := strings.Repeat("€", mqlite.MaxLastErrorLen/3) // 1,023 bytes in 341 characters
	for _, tc := range []struct {
		name   string
		reason string
		ok     bool
	}{
		{"1 KiB of ASCII", strings.Repeat("r", mqlite.MaxLastErrorLen), true},
		{"1 KiB in three-byte characters", euros + "r", true},
		{"1 KiB + 1 of ASCII", strings.Repeat("r", mqlite.MaxLastErrorLen+1), false},
		{"1 KiB + 1 in 343 characters", euros + "rr", false},
		{"1 KiB + 2 in 342 characters", euros + "€", false},
		{"not UTF-8", "\xff", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sweepSetup(t)
			ctx := context.Background()
			b.Queue(t, "q", mqlite.QueueOptions{})
			b.send("q", body("x"))
			m := b.receive("q", 1)[0]
			err := b.Store.AbandonWithReason(ctx, m.Lock(), 0, tc.reason)
			if !tc.ok {
				if !errors.Is(err, mqlite.ErrInvalidArgument) {
					t.Fatalf("%d bytes: %v, want ErrInvalidArgument", len(tc.reason), err)
				}
				if got := b.wantState("q", m.Seq, mqlite.StateLocked); got.LastError != "" {
					t.Fatalf("a refused reason was kept: %q", got.LastError)
				}
				return
			}
			if err != nil {
				t.Fatalf("%d bytes: %v", len(tc.reason), err)
			}
			if got := b.wantState("q", m.Seq, mqlite.StateActive); got.LastError != tc.reason {
				t.Fatalf("last error of %d bytes, want the %d given", len(got.LastError), len(tc.reason))
			}
		})
	}
}

// TestAbandonRetryWithAnotherReasonIsNotAReplay: the reason is part of the
// request its receipt records. The same abandon again replays; one with
// another reason, or with none, is another request on a delivery that is
// over: ErrLockLost, and the message keeps the first reason.
func TestAbandonRetryWithAnotherReasonIsNotAReplay(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.send("q", body("x"))
	l := b.receive("q", 1)[0].Lock()
	if err := b.Store.AbandonWithReason(ctx, l, 0, "timeout"); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.AbandonWithReason(ctx, l, 0, "timeout"); err != nil {
		t.Fatalf("the same abandon again: %v, want a replay", err)
	}
	for _, reason := range []string{"refused", "timeout ", ""} {
		if err := b.Store.AbandonWithReason(ctx, l, 0, reason); !errors.Is(err, mqlite.ErrLockLost) {
			t.Errorf("abandon again with reason %q: %v, want ErrLockLost", reason, err)
		}
	}
	if err := b.Store.Abandon(ctx, l, 0); !errors.Is(err, mqlite.ErrLockLost) {
		t.Errorf("Abandon again without a reason: %v, want ErrLockLost", err)
	}
	if got := b.wantState("q", l.Seq, mqlite.StateActive); got.LastError != "timeout" || got.DeliveryCount != 1 {
		t.Fatalf("last error %q after %d deliveries, want %q after 1", got.LastError, got.DeliveryCount, "timeout")
	}
}
