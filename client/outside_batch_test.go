package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of client.Batch: a lost reply hidden by the retries,
// the same Batch committed again (a replay), another Batch with the same
// locks and the same sends (a replay, as the doc says), and one with other
// sends (refused, nothing committed twice).
func TestOutsideBatchSameLocks(t *testing.T) {
	for _, verb := range []string{"complete", "reject"} {
		t.Run(verb, func(t *testing.T) {
			b, c, d := outsideSetup(t, 1, 5*time.Second)
			msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{})
			if err != nil || len(msgs) != 1 {
				t.Fatalf("receive: %d, %v", len(msgs), err)
			}
			batch := func(body string) *client.Batch {
				var bt client.Batch
				if err := bt.Send(ctx, "out", outbox.Message{Body: []byte(body)}); err != nil {
					t.Fatal(err)
				}
				if verb == "complete" {
					err = bt.Complete(msgs[0].Lock())
				} else {
					err = bt.Reject(msgs[0].Lock(), "bad", "d")
				}
				if err != nil {
					t.Fatal(err)
				}
				return &bt
			}
			first := batch("onward")
			res, err := c.Commit(ctx, first)
			t.Logf("dropped %d; first commit %+v %v", d.dropped.Load(), res, err)
			if err != nil && !errors.Is(err, client.ErrOutcomeUnknown) {
				t.Fatalf("first commit: %v", err)
			}
			for name, bt := range map[string]*client.Batch{"the same Batch": first, "a new Batch with the same items": batch("onward")} {
				res, err := c.Commit(ctx, bt)
				if err != nil || !res.Replayed {
					t.Errorf("%s again: %+v %v, want a replay", name, res, err)
				}
			}
			// The Batch and CommitTx docs: "one with other sends is" refused;
			// the deliveries are settled, so ErrAlreadySettled, as the
			// broker's reference says.
			if _, err := c.Commit(ctx, batch("other")); !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Errorf("a new Batch with the same locks and other sends: %v, want ErrAlreadySettled", err)
			}
			err = c.CommitTx(ctx, msgs[0].Lock(), func(ctx context.Context, tx consumer.Tx) error {
				return tx.Send(ctx, "out", outbox.Message{Body: []byte("other")})
			})
			if !errors.Is(err, mqlite.ErrAlreadySettled) {
				t.Errorf("CommitTx of the same lock with other sends: %v, want ErrAlreadySettled", err)
			}
			if n := onward(t, b); n != 1 {
				t.Fatalf("%d onward messages, want 1", n)
			}
		})
	}
}
