package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// fence is the WHERE every settlement and renewal shares: the current
// token, a locked row, and a lease still running at $4 (equal is lapsed).
// A settlement that finds the row held by another transaction (a second
// settlement of the delivery, a claimer reaping it) waits for it, then
// checks the fence again on the row as that one left it: of two
// settlements of one delivery, one changes the row and the other finds
// the fence broken and answers from the receipt.
const fence = `id = $1 AND queue = $2 AND lock_token = $3 AND state = 'locked' AND locked_until > $4`

// settleSQL is each operation's update of the fenced row. Every one but
// Complete writes its receipt in the same statement (withReceipt); a
// completion's receipt is its completed row, its token kept.
var settleSQL = map[driver.Op]string{
	driver.OpComplete: `UPDATE mqlite_messages SET ` + settledSet("$4") + ` WHERE ` + fence + ` RETURNING state, body_len`,
	driver.OpAbandon: withReceipt(releaseSQL(`(SELECT max_delivery_count FROM mqlite_queues WHERE name = $2)`, "$4",
		descAbandoned, `CASE WHEN $7::bigint > 0 THEN 'scheduled' ELSE 'active' END`,
		", visible_at = $4 + $7::bigint, last_error = coalesce($8, last_error)"+attemptSet("$4", "$9", "$10", "$11"), fence)),
	driver.OpReject: withReceipt(`UPDATE mqlite_messages SET state = 'dead_lettered', dead_letter_reason = $7,
		dead_letter_desc = $8, dead_lettered_at = $4, lock_token = ` + noToken + `, locked_until = 0` +
		attemptSet("$4", "$9", "$10", "$11") + ` WHERE ` + fence),
	driver.OpDefer: withReceipt(`UPDATE mqlite_messages SET state = 'deferred', lock_token = ` + noToken + `,
		locked_until = 0 WHERE ` + fence),
	// Release is Abandon with no delay on a delivery that is never the
	// last: the row goes back to active under its own id (its place in the
	// queue and its group kept), with the claim's count taken back.
	driver.OpRelease: withReceipt(`UPDATE mqlite_messages SET state = 'active', dead_letter_reason = NULL,
		dead_letter_desc = NULL, dead_lettered_at = 0, lock_token = ` + noToken + `, locked_until = 0,
		visible_at = $4, delivery_count = greatest(delivery_count - 1, 0) WHERE ` + fence),
}

// withReceipt makes the settlement update a statement that also writes its
// receipt ($3 the token as hex, $5 the operation, $6 its arguments) for
// the row it changed, and returns the new state and the body length of
// each row changed (as Complete's does). A receipt of the same key may
// still be there, expired: the new one replaces it.
func withReceipt(update string) string {
	return `WITH u AS (` + update + ` RETURNING id, state, body_len),
r AS (
	INSERT INTO mqlite_settlement_receipts (queue, seq, lock_token, operation, args, expires_at)
	SELECT $2, id, decode($3, 'hex'), $5, $6, $4 + ` + receiptTTL + ` FROM u
	ON CONFLICT (seq, lock_token, operation, args) DO UPDATE SET queue = excluded.queue, expires_at = excluded.expires_at)
SELECT state, body_len FROM u`
}

// receiptTTL is driver.ReceiptTTLMS as SQL.
var receiptTTL = strconv.Itoa(driver.ReceiptTTLMS)

// settleArgs is the arguments of settleSQL[s.Op]; a failure's attempt
// is kept in histories of n.
func settleArgs(s driver.Settlement, n int) []any {
	args := []any{s.Seq, s.Queue, s.Token, s.Now}
	if s.Op == driver.OpComplete {
		return args
	}
	args = append(args, string(s.Op), driver.ReceiptArgs(s))
	switch s.Op {
	case driver.OpAbandon:
		var lastErr any // NULL: keep the message's last error
		if s.LastError != "" {
			lastErr = s.LastError
		}
		args = append(args, s.DelayMS, lastErr, abandonError(s), driver.Cut(s.Worker, driver.MaxWorkerLen), n)
	case driver.OpReject:
		args = append(args, s.Reason, s.Description, rejectError(s), driver.Cut(s.Worker, driver.MaxWorkerLen), n)
	}
	return args
}

// Settle applies s inside tx with its receipt, in one statement. When the
// fence matches no row, a live receipt of the exact same request makes it
// a success (a replay); anything else is errs.ErrLockLost.
func (PostgreSQL) Settle(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	return settle(ctx, tx, s, replayed)
}

// settle is Settle, with unmatched answering a settlement whose fence
// matched no row.
func settle(ctx context.Context, tx driver.DBTX, s driver.Settlement, unmatched func(context.Context, driver.DBTX, driver.Settlement) error) error {
	query, ok := settleSQL[s.Op]
	if !ok {
		return fmt.Errorf("settle: unknown operation %q", s.Op)
	}
	var state string
	var bytes int64
	err := tx.QueryRowContext(ctx, query, settleArgs(s, historyOf(tx))...).Scan(&state, &bytes)
	if errors.Is(err, sql.ErrNoRows) {
		return unmatched(ctx, tx, s)
	}
	if err != nil {
		return interpret(string(s.Op), err)
	}
	rep := reporterOf(tx).by(s.Op)
	rep.change(s.Queue, "locked", state, bytes)
	rep.done()
	return nil
}

// completedReceipt finds the completed message a completion of ($1 queue,
// $2 seq, $3 token) left within the receipts' time of $4 (now).
var completedReceipt = `SELECT 1 FROM mqlite_messages
	WHERE id = $2 AND queue = $1 AND lock_token = $3 AND settled_at > $4 - ` + receiptTTL

// replayed answers a settlement whose fence matched no row at s.Now: nil
// when a live receipt shows the exact same request succeeded, else
// errs.ErrLockLost. It runs after the settlement's statement, on a
// snapshot that sees what a concurrent settlement of the delivery
// committed.
func replayed(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	if !driver.IsToken(s.Token) {
		// Receipts keep tokens decoded; only a token as the claim
		// handed it out (lowercase hex) can be the same request.
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	query := `SELECT EXISTS (SELECT 1 FROM mqlite_settlement_receipts
		WHERE seq = $2 AND lock_token = decode($3, 'hex') AND operation = $5 AND args = $6 AND queue = $1 AND expires_at > $4)`
	if s.Op == driver.OpComplete {
		query += ` OR EXISTS (` + completedReceipt + `)`
	}
	var ok bool
	if err := tx.QueryRowContext(ctx, query, s.Queue, s.Seq, s.Token, s.Now, string(s.Op), driver.ReceiptArgs(s)).Scan(&ok); err != nil {
		return interpret(string(s.Op)+": receipt", err)
	}
	if !ok {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	return nil
}

// settledReceipt finds what a settlement of the delivery ($1 queue, $2 seq,
// $3 token) left within the receipts' time of $4 (now), whatever its
// operation and arguments: a receipt, or its completed message.
var settledReceipt = `SELECT EXISTS (SELECT 1 FROM mqlite_settlement_receipts
	WHERE seq = $2 AND lock_token = decode($3, 'hex') AND queue = $1 AND expires_at > $4) OR EXISTS (` + completedReceipt + `)`

// alreadySettled answers a settlement inside a caller's transaction whose
// fence matched no row at s.Now: errs.ErrAlreadySettled when a live
// receipt shows the delivery settled (whatever the operation), else
// errs.ErrLockLost. Never nil: a transaction that runs again after its
// first run committed must not commit its effects twice.
func alreadySettled(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	if !driver.IsToken(s.Token) {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	var settled bool
	if err := tx.QueryRowContext(ctx, settledReceipt, s.Queue, s.Seq, s.Token, s.Now).Scan(&settled); err != nil {
		return interpret(string(s.Op)+": receipt", err)
	}
	if settled {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrAlreadySettled)
	}
	return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
}

// SettleTx settles s inside tx, a transaction on the store's handle or on
// the application's own pgx handle, at the store's now (nowOf). Only a
// transaction on the store's own handle is told to the store
// (ConnConfig.Settling), which acts on it when tx commits: the store never
// sees the commit of a transaction on another handle. It never replays
// (alreadySettled).
func (PostgreSQL) SettleTx(ctx context.Context, tx driver.DBTX, s driver.Settlement) error {
	now, err := nowOf(tx)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Op, err)
	}
	s.Now = now
	if _, ok := settleSQL[s.Op]; !ok {
		return fmt.Errorf("settle: unknown operation %q", s.Op)
	}
	reporterOf(tx).settling(s.Op, s.Queue, s.Seq, s.Token)
	return settle(ctx, tx, s, alreadySettled)
}

// completeManySQL completes, at $1, every delivery of the arrays $2 (seq),
// $3 (queue), $4 (token) whose row is locked under the token with its
// lease running, and returns their ids. It locks the rows in id order, so
// two calls over deliveries they share never deadlock; a row another
// transaction holds is waited for and checked again as it is then.
var completeManySQL = `WITH l AS (
	SELECT m.id FROM unnest($2::bigint[], $3::text[], $4::text[]) AS l(seq, queue, token)
	  JOIN mqlite_messages m ON m.id = l.seq
	 WHERE m.queue = l.queue AND m.lock_token = l.token AND m.state = 'locked' AND m.locked_until > $1
	 ORDER BY m.id
	 FOR UPDATE OF m)
UPDATE mqlite_messages SET ` + settledSet("$1") + `
 WHERE id IN (SELECT id FROM l)
RETURNING id, queue, body_len`

// CompleteMany completes every lease of locks in one statement (the rows
// stay, completed: each is the receipt of its completion). A delivery
// whose row was not completed goes through Settle, which answers it from a
// receipt or with errs.ErrLockLost. Each delivery gets its own result.
func (p PostgreSQL) CompleteMany(ctx context.Context, tx driver.DBTX, locks []driver.Settlement, now int64) ([]error, error) {
	seqs, queues, tokens := make([]int64, len(locks)), make([]string, len(locks)), make([]string, len(locks))
	for i, l := range locks {
		seqs[i], queues[i], tokens[i] = l.Seq, l.Queue, l.Token
	}
	rows, err := tx.QueryContext(ctx, completeManySQL, now, seqs, queues, tokens)
	if err != nil {
		return nil, interpret("complete", err)
	}
	completed := make(map[int64]bool, len(locks))
	rep := reporterOf(tx).by(driver.OpComplete)
	for rows.Next() {
		var id, bytes int64
		var queue string
		if err := rows.Scan(&id, &queue, &bytes); err != nil {
			rows.Close()
			return nil, interpret("complete", err)
		}
		completed[id] = true
		rep.change(queue, "locked", stateCompleted, bytes)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, interpret("complete", err)
	}
	if len(completed) > 0 {
		rep.done()
	}
	out := make([]error, len(locks))
	for i, l := range locks {
		if completed[l.Seq] {
			continue
		}
		l.Op, l.Now = driver.OpComplete, now
		err := p.Settle(ctx, tx, l)
		if err != nil && !errors.Is(err, errs.ErrLockLost) {
			return nil, err
		}
		out[i] = err
	}
	return out, nil
}

// Renew extends a live lease by the queue's lock duration from r.Now and
// returns the new expiry. It never revives a lapsed lease.
func (PostgreSQL) Renew(ctx context.Context, tx driver.DBTX, r driver.RenewRequest) (int64, error) {
	var until int64
	err := tx.QueryRowContext(ctx, `UPDATE mqlite_messages
		SET locked_until = $4 + (SELECT lock_duration_ms FROM mqlite_queues WHERE name = $2)
		WHERE `+fence+` RETURNING locked_until`, r.Seq, r.Queue, r.Token, r.Now).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("renew %s/%d: %w", r.Queue, r.Seq, errs.ErrLockLost)
	}
	if err != nil {
		return 0, interpret("renew", err)
	}
	return until, nil
}
