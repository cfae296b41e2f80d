package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/mqlite/mqlite/internal/errs"
)

// Op is a settlement operation.
type Op string

// The settlement operations.
const (
	OpComplete Op = "complete"
	OpAbandon  Op = "abandon"
	OpReject   Op = "reject"
	OpDefer    Op = "defer"
)

// Settlement is one fenced settlement request. Everything in it is part of
// the receipt key: a retry must repeat the request exactly to replay.
type Settlement struct {
	Op          Op
	Queue       string
	Seq         int64
	Token       string
	DelayMS     int64  // Abandon
	Reason      string // Reject
	Description string // Reject
	Now         int64
}

// receiptArgs encodes the arguments that change what the settlement does.
func (s Settlement) receiptArgs() string {
	switch s.Op {
	case OpAbandon:
		return strconv.FormatInt(s.DelayMS, 10)
	case OpReject:
		return strconv.Quote(s.Reason) + " " + strconv.Quote(s.Description)
	}
	return ""
}

// fence is the WHERE every settlement and renewal shares: the current
// token, a locked row, and a lease still running (equal is expired).
const fence = `id = ?1 AND queue = ?2 AND lock_token = ?3 AND state = 'locked' AND locked_until > ?4`

var settleSQL = map[Op]string{
	OpComplete: `DELETE FROM messages WHERE ` + fence,
	OpAbandon: release{MaxDelivery: `(SELECT max_delivery_count FROM queues WHERE name = ?2)`, Now: "?4",
		Desc: "abandoned on the last allowed delivery", Back: `CASE WHEN ?5 > 0 THEN 'scheduled' ELSE 'active' END`,
		Set: ", visible_at = ?4 + ?5", Where: fence}.sql(),
	OpReject: `UPDATE messages SET state = 'dead_lettered', dead_letter_reason = ?5, dead_letter_desc = ?6,
		dead_lettered_at = ?4, lock_token = ` + noToken + `, locked_until = 0 WHERE ` + fence,
	OpDefer: `UPDATE messages SET state = 'deferred', lock_token = ` + noToken + `, locked_until = 0 WHERE ` + fence,
}

// Settle applies s inside tx and writes its receipt there. When the fence
// matches no row, a live receipt of the exact same request makes it a
// success (a replay); anything else is errs.ErrLockLost.
func Settle(ctx context.Context, tx DBTX, s Settlement) error {
	query, ok := settleSQL[s.Op]
	if !ok {
		return fmt.Errorf("settle: unknown operation %q", s.Op)
	}
	args := []any{s.Seq, s.Queue, s.Token, s.Now}
	switch s.Op {
	case OpAbandon:
		args = append(args, s.DelayMS)
	case OpReject:
		args = append(args, s.Reason, s.Description)
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", s.Op, err)
	}
	rargs := s.receiptArgs()
	if n == 0 {
		if !isToken(s.Token) {
			// Receipts keep tokens decoded; only a token as the claim
			// handed it out (lowercase hex) can be the same request.
			return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
		}
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM settlement_receipts
			WHERE seq = ?2 AND lock_token = unhex(?3) AND operation = ?4 AND args = ?5 AND queue = ?1 AND expires_at > ?6`,
			s.Queue, s.Seq, s.Token, string(s.Op), rargs, s.Now).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
		}
		if err != nil {
			return fmt.Errorf("%s: receipt: %w", s.Op, err)
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO settlement_receipts
		(queue, seq, lock_token, operation, args, expires_at) VALUES (?, ?, unhex(?), ?, ?, ?)`,
		s.Queue, s.Seq, s.Token, string(s.Op), rargs, s.Now+ReceiptTTLMS); err != nil {
		return fmt.Errorf("%s: write receipt: %w", s.Op, err)
	}
	return nil
}

// isToken reports whether t has the form of a lock token: 32 lowercase hex
// digits, the text of lower(hex(randomblob(16))).
func isToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// RenewRequest is one lease to extend.
type RenewRequest struct {
	Queue string
	Seq   int64
	Token string
	Now   int64
}

// Renew extends a live lease by the queue's lock duration from now and
// returns the new expiry. It never revives an expired lease.
func Renew(ctx context.Context, tx DBTX, r RenewRequest) (int64, error) {
	var until int64
	err := tx.QueryRowContext(ctx, `UPDATE messages
		SET locked_until = ?4 + (SELECT lock_duration_ms FROM queues WHERE name = ?2)
		WHERE `+fence+` RETURNING locked_until`, r.Seq, r.Queue, r.Token, r.Now).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("renew %s/%d: %w", r.Queue, r.Seq, errs.ErrLockLost)
	}
	if err != nil {
		return 0, fmt.Errorf("renew: %w", err)
	}
	return until, nil
}

// lockRef is one delivery of CompleteMany, as JSON for json_each.
type lockRef struct {
	Queue string `json:"q"`
	Seq   int64  `json:"s"`
	Token string `json:"t"`
}

// completeManySQL deletes every fenced row named in the JSON array ?1 in one
// statement: json_each drives, each row found by its rowid.
const completeManySQL = `DELETE FROM messages WHERE id IN (
	SELECT m.id FROM json_each(?1) l JOIN messages m ON m.id = l.value ->> 's'
	 WHERE m.queue = l.value ->> 'q' AND m.lock_token = l.value ->> 't'
	   AND m.state = 'locked' AND m.locked_until > ?2)
	RETURNING id`

// receiptsSQL writes the Complete receipts of the JSON array ?1.
const receiptsSQL = `INSERT OR REPLACE INTO settlement_receipts
	(queue, seq, lock_token, operation, args, expires_at)
	SELECT value ->> 'q', value ->> 's', unhex(value ->> 't'), 'complete', '', ?2 FROM json_each(?1)`

// CompleteMany completes several deliveries with two statements, one DELETE
// and one INSERT of their receipts, however many there are. A delivery whose
// row was not deleted goes through Settle, which answers it from a receipt
// or with errs.ErrLockLost. Each delivery gets its own result.
func CompleteMany(ctx context.Context, tx DBTX, locks []Settlement, now int64) ([]error, error) {
	refs := make([]lockRef, len(locks))
	for i, l := range locks {
		refs[i] = lockRef{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
	}
	blob, err := json.Marshal(refs)
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	rows, err := tx.QueryContext(ctx, completeManySQL, string(blob), now)
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	deleted := make(map[int64]bool, len(locks))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("complete: %w", err)
		}
		deleted[id] = true
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	out := make([]error, len(locks))
	done := refs[:0:0]
	for i, l := range locks {
		if deleted[l.Seq] {
			done = append(done, refs[i])
			continue
		}
		l.Op, l.Now = OpComplete, now
		err := Settle(ctx, tx, l)
		if err != nil && !errors.Is(err, errs.ErrLockLost) {
			return nil, err
		}
		out[i] = err
	}
	if len(done) > 0 {
		if blob, err = json.Marshal(done); err != nil {
			return nil, fmt.Errorf("complete: %w", err)
		}
		if _, err := tx.ExecContext(ctx, receiptsSQL, string(blob), now+ReceiptTTLMS); err != nil {
			return nil, fmt.Errorf("complete: write receipts: %w", err)
		}
	}
	return out, nil
}
