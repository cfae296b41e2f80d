package mqlite_test

import (
	"context"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestSeqsAreNeverReused deletes the newest messages of a queue in each way
// a store deletes them, then sends one message alone and two in a batch:
// each gets a seq past every seq ever given. The control drops the trigger
// that keeps the floor (mqlite_sequence_floor): the next send then reuses
// the deleted seq, which shows the floor is what keeps them apart.
func TestSeqsAreNeverReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		delete func(t *testing.T, b *testdb.Bundle, seqs []int64)
	}{
		{"purge", func(t *testing.T, b *testdb.Bundle, seqs []int64) {
			if n, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateActive}); err != nil || n != len(seqs) {
				t.Fatalf("purge: %d, %v", n, err)
			}
		}},
		{"bulk completion", func(t *testing.T, b *testdb.Bundle, seqs []int64) {
			ms, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: len(seqs)})
			if err != nil || len(ms) != len(seqs) {
				t.Fatalf("receive: %d, %v", len(ms), err)
			}
			locks := make([]mqlite.Lock, len(ms))
			for i, m := range ms {
				locks[i] = m.Lock()
			}
			if _, err := b.Store.CompleteBatch(ctx, locks); err != nil {
				t.Fatal(err)
			}
		}},
		{"receive and delete", func(t *testing.T, b *testdb.Bundle, seqs []int64) {
			if ms, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: len(seqs), Mode: mqlite.ReceiveAndDelete}); err != nil || len(ms) != len(seqs) {
				t.Fatalf("receive and delete: %d, %v", len(ms), err)
			}
		}},
	} {
		for _, control := range []bool{false, true} {
			name := tc.name
			if control {
				name += "/without the floor"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
				if control {
					if _, err := b.Store.DB().Exec(`DROP TRIGGER mqlite_sequence_floor`); err != nil {
						t.Fatal(err)
					}
				}
				seqs := b.Send(t, "q", make([]outbox.Message, 12)...)
				newest := seqs[len(seqs)-1]
				tc.delete(t, b, seqs)
				if n := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE settled_at IS NULL`); n != 0 {
					t.Fatalf("%d messages left", n)
				}
				one := b.Send(t, "q", outbox.Message{})
				two := b.Send(t, "q", outbox.Message{}, outbox.Message{})
				got := append(one, two...)
				reused := got[0] <= newest
				if reused != control {
					t.Fatalf("seqs %v after the newest, %d, was deleted (control %v)", got, newest, control)
				}
				if !control && (got[1] != got[0]+1 || got[2] != got[1]+1) {
					t.Fatalf("seqs %v, want consecutive", got)
				}
			})
		}
	}
}
