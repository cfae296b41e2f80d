package engine

import (
	"context"
	"testing"
)

// TestClaimOneFillsWhatItWrote pins the claim of one message, which returns
// only claimedColumns and fills in the state, the token and the lease end
// from its own arguments: they must be what the row holds, the token fresh
// for every delivery and of the form the receipts accept (isToken), and the
// other columns those of the message.
func TestClaimOneFillsWhatItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := planDB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO mqlite_messages (queue, enqueued_at, message_id, group_id, subject, properties, content_key, body_len, body)
		VALUES ('q', 1, 'm', 'g', 's', '{"k":"v"}', x'00', 1, x'62')`); err != nil {
		t.Fatal(err)
	}
	q := Queue{Name: "q", MaxDeliveryCount: 10, LockDurationMS: 30000}
	seen := map[string]bool{}
	for now := int64(100); now <= 100+3*q.LockDurationMS; now += q.LockDurationMS + 1 {
		// Each pass claims at a moment the previous lease has lapsed at,
		// so that the same message is delivered again (reaped first).
		rows, err := Claim(ctx, db, ClaimRequest{Queue: q, Max: 1, Now: now})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim at %d: %d rows, %v", now, len(rows), err)
		}
		c := rows[0]
		var state, token string
		var until, dc int64
		if err := db.QueryRowContext(ctx, `SELECT state, lock_token, locked_until, delivery_count FROM mqlite_messages WHERE id = ?`,
			c.Seq).Scan(&state, &token, &until, &dc); err != nil {
			t.Fatal(err)
		}
		if c.State != state || c.LockToken != token || c.LockedUntil != until || c.DeliveryCount != dc {
			t.Errorf("claim returned state %q token %q until %d count %d, the row holds %q %q %d %d",
				c.State, c.LockToken, c.LockedUntil, c.DeliveryCount, state, token, until, dc)
		}
		if state != "locked" || until != now+q.LockDurationMS || !isToken(token) || seen[token] {
			t.Errorf("claim at %d: state %q, lease end %d, token %q (a fresh one: %v)", now, state, until, token, !seen[token])
		}
		seen[token] = true
		if c.MessageID != "m" || c.GroupID == nil || *c.GroupID != "g" || c.Subject != "s" || c.Properties != `{"k":"v"}` || string(c.Body) != "b" {
			t.Errorf("claimed row %+v", c)
		}
	}
}
