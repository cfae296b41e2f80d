package mqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// TestClaimSkipsTheProbeOnlyWhenNothingIsDue: a claim skips the due probe
// while its queue has nothing due, and still sees every due moment that
// arose since, however it arose: a row made scheduled by the application's
// own SQL, a rolled-back transaction, a lease that lapsed. The loops are
// off, so only the claim's probe can promote or reap.
func TestClaimSkipsTheProbeOnlyWhenNothingIsDue(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Hour})
	seqs := b.send("q", body("a"), body("b"), body("c"))
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[0] {
		t.Fatalf("first receive: %+v", got)
	}
	// b, made scheduled and due by the application's SQL after the probe
	// of the first receive, is promoted by the next one.
	now := b.Clock.Now().UnixMilli()
	if err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := tx.SQL().ExecContext(tx.Context(),
			`UPDATE messages SET state = 'scheduled', visible_at = ? WHERE id = ?`, now, seqs[1])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[1] {
		t.Fatalf("receive after the application scheduled b: %+v, want seq %d", got, seqs[1])
	}
	// A rolled-back transaction that took c out leaves it claimable.
	rollback := errors.New("roll back")
	if err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := tx.SQL().ExecContext(tx.Context(), `DELETE FROM messages WHERE id = ?`, seqs[2]); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatalf("tx: %v", err)
	}
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[2] {
		t.Fatalf("receive after the rollback: %+v, want seq %d", got, seqs[2])
	}
	if got := b.receive("q", 1); len(got) != 0 {
		t.Fatalf("receive with every lease running: %+v", got)
	}
	// The leases lapse: the next claims reap them, in order.
	b.Clock.Advance(time.Hour)
	for i, seq := range seqs {
		got := b.receive("q", 1)
		if len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != 2 {
			t.Fatalf("receive %d after the leases lapsed: %+v, want seq %d on delivery 2", i, got, seq)
		}
	}
}
