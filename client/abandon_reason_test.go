package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// TestAbandonReasonOverTheBroker: through the broker, as on the store, a
// reason of exactly mqlite.MaxLastErrorLen bytes is kept and one byte more
// is ErrInvalidArgument with the delivery still held; a retry with the
// same reason replays and one with another reason is ErrLockLost.
func TestAbandonReasonOverTheBroker(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	for _, src := range []struct {
		name string
		c    consumer.Store
	}{{"store", b.Store}, {"client", b.src}} {
		t.Run(src.name, func(t *testing.T) {
			ctx := context.Background()
			b.Send(t, "q", outbox.Message{})
			msgs, err := src.c.Receive(ctx, "q", mqlite.ReceiveOptions{})
			if err != nil || len(msgs) != 1 {
				t.Fatalf("receive: %d, %v", len(msgs), err)
			}
			l := msgs[0].Lock()
			kib := strings.Repeat("r", mqlite.MaxLastErrorLen)
			if err := src.c.AbandonWithReason(ctx, l, 0, kib+"r"); !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("1 KiB + 1: %v, want ErrInvalidArgument", err)
			}
			if err := src.c.AbandonWithReason(ctx, l, 0, kib); err != nil {
				t.Fatalf("1 KiB: %v (the refused call must have left the delivery held)", err)
			}
			if err := src.c.AbandonWithReason(ctx, l, 0, kib); err != nil {
				t.Fatalf("the same abandon again: %v, want a replay", err)
			}
			if err := src.c.AbandonWithReason(ctx, l, 0, "another"); !errors.Is(err, mqlite.ErrLockLost) {
				t.Fatalf("abandon again with another reason: %v, want ErrLockLost", err)
			}
			got, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{FromSeq: l.Seq, Max: 1})
			if err != nil || len(got) != 1 || got[0].LastError != kib {
				t.Fatalf("peek: %d messages, %v; want the 1 KiB reason kept", len(got), err)
			}
			if _, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateActive}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
