package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// receiptArgs encodes the arguments that change what the settlement does
// (driver.ReceiptArgs).
var receiptArgs = driver.ReceiptArgs

// rejectError is the error of a Reject's attempt: its reason (?5), and its
// description (?6) after a colon when it has one.
const rejectError = `?5 || CASE WHEN ?6 <> '' THEN ': ' || ?6 ELSE '' END`

// fence is the WHERE every settlement and renewal shares: the current
// token, a locked row, and a lease still running (equal is expired).
const fence = `id = ?1 AND queue = ?2 AND lock_token = ?3 AND state = 'locked' AND locked_until > ?4`

var settleSQL = map[Op]string{
	OpComplete: `UPDATE mqlite_messages SET ` + settledSet("?4") + ` WHERE ` + fence,
	OpAbandon: release{MaxDelivery: `(SELECT max_delivery_count FROM mqlite_queues WHERE name = ?2)`, Now: "?4",
		Desc: "abandoned on the last allowed delivery", Back: `CASE WHEN ?5 > 0 THEN 'scheduled' ELSE 'active' END`,
		Set: ", visible_at = ?4 + ?5, last_error = coalesce(?6, last_error)", Where: fence,
		Error: "coalesce(?6, '')", Worker: "?7"}.sql(),
	OpReject: `UPDATE mqlite_messages SET state = 'dead_lettered', dead_letter_reason = ?5, dead_letter_desc = ?6,
		dead_lettered_at = ?4, lock_token = ` + noToken + `, locked_until = 0` +
		attemptSet("?4", rejectError, "?7") + ` WHERE ` + fence,
	OpDefer: `UPDATE mqlite_messages SET state = 'deferred', lock_token = ` + noToken + `, locked_until = 0 WHERE ` + fence,
	// OpRelease is Abandon with no delay on a delivery that is never the
	// last: the row goes back to active under its own id (its place in the
	// queue and its group kept), with the claim's count taken back.
	OpRelease: `UPDATE mqlite_messages SET state = 'active', dead_letter_reason = NULL, dead_letter_desc = NULL,
		dead_lettered_at = 0, lock_token = ` + noToken + `, locked_until = 0, visible_at = ?4,
		delivery_count = max(delivery_count - 1, 0) WHERE ` + fence,
}

// hotSettle is settleSQL on the hot path (hot.go), and hotReceipt the
// receipt a settlement other than a completion writes.
var (
	hotSettle  = hotMap(settleSQL)
	hotReceipt = hot(`INSERT OR REPLACE INTO mqlite_settlement_receipts
		(queue, seq, lock_token, operation, args, expires_at) VALUES (?, ?, unhex(?), ?, ?, ?)`)
)

// hotMap is the hot statements of the texts of m, under the same keys.
func hotMap[K comparable](m map[K]string) map[K]*hotQuery {
	out := make(map[K]*hotQuery, len(m))
	for k, text := range m {
		out[k] = hot(text)
	}
	return out
}

// completedReceipt finds the completed message a completion of (?1 queue,
// ?2 seq, ?3 token) left within the receipts' time of ?4 (now).
var completedReceipt = `SELECT 1 FROM mqlite_messages
	WHERE id = ?2 AND queue = ?1 AND lock_token = ?3 AND settled_at > ?4 - ` + receiptTTL

// receiptTTL is ReceiptTTLMS as SQL.
var receiptTTL = strconv.Itoa(ReceiptTTLMS)

// Settle applies s inside tx and writes its receipt there (a completion's
// receipt is its completed message). When the fence matches no row, a live receipt
// of the exact same request makes it a success (a replay); anything else is
// errs.ErrLockLost.
func Settle(ctx context.Context, tx DBTX, s Settlement) error {
	return settle(ctx, tx, s, replayed)
}

// settle is Settle, with unmatched answering a settlement whose fence
// matched no row.
func settle(ctx context.Context, tx DBTX, s Settlement, unmatched func(context.Context, DBTX, Settlement) error) error {
	query, ok := hotSettle[s.Op]
	if !ok {
		return fmt.Errorf("settle: unknown operation %q", s.Op)
	}
	args := []any{s.Seq, s.Queue, s.Token, s.Now}
	switch s.Op {
	case OpAbandon:
		var lastErr any // NULL: keep the message's last error
		if s.LastError != "" {
			lastErr = s.LastError
		}
		args = append(args, s.DelayMS, lastErr, s.Worker)
	case OpReject:
		args = append(args, s.Reason, s.Description, s.Worker)
	}
	res, err := query.exec(ctx, tx, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Op, err)
	}
	if res.rows == 0 {
		return unmatched(ctx, tx, s)
	}
	if s.Op == OpComplete {
		return nil // the completed message is the receipt
	}
	if _, err := hotReceipt.exec(ctx, tx,
		s.Queue, s.Seq, s.Token, string(s.Op), receiptArgs(s), s.Now+ReceiptTTLMS); err != nil {
		return fmt.Errorf("%s: write receipt: %w", s.Op, err)
	}
	return nil
}

// replayed answers a settlement whose fence matched no row at s.Now: nil
// when a live receipt shows the exact same request succeeded, else
// errs.ErrLockLost.
func replayed(ctx context.Context, tx DBTX, s Settlement) error {
	if !isToken(s.Token) {
		// Receipts keep tokens decoded; only a token as the claim
		// handed it out (lowercase hex) can be the same request.
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM mqlite_settlement_receipts
		WHERE seq = ?2 AND lock_token = unhex(?3) AND operation = ?4 AND args = ?5 AND queue = ?1 AND expires_at > ?6`,
		s.Queue, s.Seq, s.Token, string(s.Op), receiptArgs(s), s.Now).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) && s.Op == OpComplete {
		err = tx.QueryRowContext(ctx, completedReceipt, s.Queue, s.Seq, s.Token, s.Now).Scan(&one)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	if err != nil {
		return fmt.Errorf("%s: receipt: %w", s.Op, err)
	}
	return nil
}

// settledReceipt finds what a settlement of the delivery (?1 queue, ?2 seq,
// ?3 token) left within the receipts' time of ?4 (now), whatever its
// operation and arguments: a receipt, or its completed message.
var settledReceipt = `SELECT EXISTS (SELECT 1 FROM mqlite_settlement_receipts
	WHERE seq = ?2 AND lock_token = unhex(?3) AND queue = ?1 AND expires_at > ?4) OR EXISTS (` + completedReceipt + `)`

// alreadySettled answers a settlement inside a caller's transaction whose
// fence matched no row at s.Now: errs.ErrAlreadySettled when a live
// receipt shows the delivery settled (by another transaction, an earlier
// run of this one, a plain settlement, whatever the operation), else
// errs.ErrLockLost. Never nil, unlike replayed: a transaction that runs
// again after its first run committed must not commit its effects twice,
// so the caller rolls it back. Only a request that is answered by its
// own record (a commit request's idempotency key) replays.
func alreadySettled(ctx context.Context, tx DBTX, s Settlement) error {
	if !isToken(s.Token) {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
	}
	var settled bool
	if err := tx.QueryRowContext(ctx, settledReceipt, s.Queue, s.Seq, s.Token, s.Now).Scan(&settled); err != nil {
		return fmt.Errorf("%s: receipt: %w", s.Op, err)
	}
	if settled {
		return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrAlreadySettled)
	}
	return fmt.Errorf("%s %s/%d: %w", s.Op, s.Queue, s.Seq, errs.ErrLockLost)
}

// completeTxSQL is the completion of CompleteTx: settleSQL[OpComplete] that
// reports itself to the store through mqlite_settling and reads the store's
// clock (mqlite_now), in one statement where SettleTx takes two. The
// function names the row to seek, so SQLite calls it exactly once, before
// the statement writes anything; on another handle neither function exists
// and the statement fails to prepare, having written nothing.
var completeTxSQL = `UPDATE mqlite_messages SET ` + settledSet("mqlite_now()") + `
	WHERE id = (SELECT ?1 WHERE mqlite_settling('` + string(OpComplete) + `', ?2, ?1, ?3) IS NOT NULL)
	  AND queue = ?2 AND lock_token = ?3 AND state = 'locked' AND locked_until > mqlite_now()`

// hotCompleteTx is completeTxSQL on the hot path (hot.go).
var hotCompleteTx = hot(completeTxSQL)

// CompleteTx is SettleTx of a completion (s.Op and s.Now are ignored):
// completeTxSQL, then, when it completed nothing, alreadySettled at the
// store's now.
func CompleteTx(ctx context.Context, tx DBTX, s Settlement) error {
	s.Op = OpComplete
	res, err := hotCompleteTx.exec(ctx, tx, s.Seq, s.Queue, s.Token)
	if err != nil {
		return interpret(string(s.Op), err)
	}
	if res.rows > 0 {
		return nil // the completed message is the receipt
	}
	if err := tx.QueryRowContext(ctx, `SELECT mqlite_now()`).Scan(&s.Now); err != nil {
		return interpret(string(s.Op), err)
	}
	return alreadySettled(ctx, tx, s)
}

// isToken reports whether t has the form of a lock token, the text of
// lower(hex(randomblob(16))) (driver.IsToken).
var isToken = driver.IsToken

// hotRenew is the renewal of a lease, on the hot path (hot.go).
var hotRenew = hot(`UPDATE mqlite_messages
	SET locked_until = ?4 + (SELECT lock_duration_ms FROM mqlite_queues WHERE name = ?2)
	WHERE ` + fence + ` RETURNING locked_until`)

// Renew extends a live lease by the queue's lock duration from now and
// returns the new expiry. It never revives an expired lease.
func Renew(ctx context.Context, tx DBTX, r RenewRequest) (int64, error) {
	var until int64
	err := hotRenew.row(ctx, tx, r.Seq, r.Queue, r.Token, r.Now).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("renew %s/%d: %w", r.Queue, r.Seq, errs.ErrLockLost)
	}
	if err != nil {
		return 0, fmt.Errorf("renew: %w", err)
	}
	return until, nil
}

// lockRef is one delivery of a replayed attempt, as JSON for json_each.
type lockRef struct {
	Queue string `json:"q"`
	Seq   int64  `json:"s"`
	Token string `json:"t"`
}

// completeChunk is the most deliveries one statement of CompleteMany names.
// A chunk is padded with NULL rows up to a power of two, so that at most
// eight statement texts of each kind sit in the connection's cache.
const completeChunk = 128

// bulkComplete is the number of deliveries from which CompleteMany deletes
// their rows and writes receipts instead of keeping them completed. A batch
// completes neighbouring rows: deleting them empties whole pages, which
// SQLite frees without writing them, where completed rows rewrite every
// page. Measured in WAL pages per completed message (docs/benchmark.md),
// completed rows cost less up to about 8 deliveries, a delete from about 16.
const bulkComplete = 12

// completeSQL returns the completion of the n fenced deliveries listed as
// (seq, queue, token) rows of anonymous parameters after ?1, now: each row
// found locked under its token is completed (the receipt of its
// completion) or, in bulk, is deleted, its receipt written by receiptSQL.
// A padding row is all NULL: it matches no message. Parameters, not a JSON
// array: SQLite parsed the array again for every field it read.
func completeSQL(n int, bulk bool) string {
	var b strings.Builder
	if bulk {
		b.WriteString(`DELETE FROM mqlite_messages`)
	} else {
		b.WriteString(`UPDATE mqlite_messages SET ` + settledSet("?1"))
	}
	// The lease check comes before the rows in the text, so that their
	// anonymous parameters are numbered from 2 in both statements.
	b.WriteString(` WHERE locked_until > ?1 AND id IN (
	SELECT m.id FROM (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
	}
	b.WriteString(`) l CROSS JOIN mqlite_messages m ON m.id = l.column1
	 WHERE m.queue = l.column2 AND m.lock_token = l.column3 AND m.state = 'locked')
	RETURNING id`)
	return b.String()
}

// receiptSQL returns the INSERT of n Complete receipts from (queue, seq,
// token, expires_at) rows; a padding row is all NULL and writes none.
func receiptSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR REPLACE INTO mqlite_settlement_receipts
	(queue, seq, lock_token, operation, args, expires_at)
	SELECT column1, column2, unhex(column3), 'complete', '', column4 FROM (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?)")
	}
	b.WriteString(`) WHERE column1 IS NOT NULL`)
	return b.String()
}

// completeSQLs holds, for every power of two up to completeChunk, the
// completion that keeps the rows and the bulk one.
var completeSQLs = bySize(completeChunk, func(n int) [2]string { return [2]string{completeSQL(n, false), completeSQL(n, true)} })

// receiptSQLs holds receiptSQL for every power of two up to completeChunk.
var receiptSQLs = bySize(completeChunk, receiptSQL)

// hotCompletes and hotReceipts are completeSQLs and receiptSQLs on the hot
// path (hot.go).
var (
	hotCompletes = bySize(completeChunk, func(n int) [2]*hotQuery {
		return [2]*hotQuery{hot(completeSQLs[n][0]), hot(completeSQLs[n][1])}
	})
	hotReceipts = bySize(completeChunk, func(n int) *hotQuery { return hot(receiptSQLs[n]) })
)

// chunkOf is the statement size for k deliveries: the least power of two
// that holds them, at most completeChunk.
func chunkOf(k int) int {
	n := 1
	for n < k && n < completeChunk {
		n *= 2
	}
	return n
}

// CompleteMany completes several deliveries with one statement per
// completeChunk of them, which keeps their rows completed or, from
// bulkComplete deliveries on, deletes their rows and writes their receipts
// with one more statement per chunk. A delivery whose row was not completed
// goes through Settle, which answers it from a receipt or with
// errs.ErrLockLost. Each delivery gets its own result.
func CompleteMany(ctx context.Context, tx DBTX, locks []Settlement, now int64) ([]error, error) {
	return completeMany(ctx, tx, locks, now, len(locks) >= bulkComplete)
}

// completeMany is CompleteMany, keeping the rows completed or, when
// deleting, deleting them and writing their receipts.
func completeMany(ctx context.Context, tx DBTX, locks []Settlement, now int64, deleting bool) ([]error, error) {
	bulk := 0
	if deleting {
		bulk = 1
	}
	completed := make(map[int64]bool, len(locks))
	for rest := locks; len(rest) > 0; {
		k := min(len(rest), completeChunk)
		n := chunkOf(k)
		args := make([]any, 1, 3*n+1)
		args[0] = now
		for _, l := range rest[:k] {
			args = append(args, l.Seq, l.Queue, l.Token)
		}
		for range n - k {
			args = append(args, nil, nil, nil)
		}
		if err := hotCompletes[n][bulk].each(ctx, tx, args, func(row scanner) error {
			var id int64
			if err := row.Scan(&id); err != nil {
				return err
			}
			completed[id] = true
			return nil
		}); err != nil {
			return nil, fmt.Errorf("complete: %w", err)
		}
		rest = rest[k:]
	}
	out := make([]error, len(locks))
	var done []Settlement // deleted in bulk: their receipts
	for i, l := range locks {
		if completed[l.Seq] {
			if bulk == 1 {
				done = append(done, l)
			}
			continue
		}
		l.Op, l.Now = OpComplete, now
		err := Settle(ctx, tx, l)
		if err != nil && !errors.Is(err, errs.ErrLockLost) {
			return nil, err
		}
		out[i] = err
	}
	for len(done) > 0 {
		k := min(len(done), completeChunk)
		n := chunkOf(k)
		args := make([]any, 0, 4*n)
		for _, l := range done[:k] {
			args = append(args, l.Queue, l.Seq, l.Token, now+ReceiptTTLMS)
		}
		for range n - k {
			args = append(args, nil, nil, nil, nil)
		}
		if _, err := hotReceipts[n].exec(ctx, tx, args...); err != nil {
			return nil, fmt.Errorf("complete: write receipts: %w", err)
		}
		done = done[k:]
	}
	return out, nil
}
