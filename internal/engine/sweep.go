package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
)

// Dead-letter reasons and descriptions written by the engine.
const (
	descLeaseExpired = driver.DescLeaseExpired
	descRecovered    = "the process holding the last allowed delivery ended"
	descTTL          = driver.DescTTL
)

// leaseExpired is the error of a lapsed lease's attempt, as SQL.
const leaseExpired = "'" + driver.AttemptLeaseExpired + "'"

// rowMaxDelivery is the delivery limit of the row being updated, for the
// statements that span queues.
const rowMaxDelivery = `(SELECT max_delivery_count FROM mqlite_queues WHERE name = mqlite_messages.queue)`

// release describes an UPDATE that ends deliveries: each row goes back to
// Back, or to the dead letters (reason ReasonMaxDelivery) when the delivery
// that ended was the last one allowed. The claim path, Abandon, the reaper
// sweep and recovery differ only in these fields, each an SQL fragment.
type release struct {
	MaxDelivery string // the row's delivery limit
	Now         string // the current time
	Desc        string // the dead-letter description (plain text)
	Back        string // the state to go back to: 'active', or Abandon's choice
	Set         string // further assignments, each starting with ", "
	Where       string // the rows
	// Attempt is the error and the worker of the attempt each row's
	// history records (attemptSQL), two SQL expressions; none when Error
	// is "".
	Error, Worker string
}

// sql returns the UPDATE statement.
func (r release) sql() string {
	last := `delivery_count >= ` + r.MaxDelivery
	return `UPDATE mqlite_messages SET
	state = CASE WHEN ` + last + ` THEN 'dead_lettered' ELSE ` + r.Back + ` END,
	dead_letter_reason = CASE WHEN ` + last + ` THEN '` + ReasonMaxDelivery + `' END,
	dead_letter_desc = CASE WHEN ` + last + ` THEN '` + r.Desc + `' END,
	dead_lettered_at = CASE WHEN ` + last + ` THEN ` + r.Now + ` ELSE 0 END,
	lock_token = ` + noToken + `, locked_until = 0` + r.Set + attemptSet(r.Now, r.Error, r.Worker) + `
	WHERE ` + r.Where
}

// attemptSet is the assignment that appends the attempt (at, error,
// worker: SQL expressions) to the history of the row a failure updates,
// ", attempts = ..." ("" when error is ""). mqlite_attempt (conn.go) keeps
// the last ConnConfig.AttemptHistory of them; a message that never fails
// never runs it, and its attempts stay NULL.
func attemptSet(at, error, worker string) string {
	if error == "" {
		return ""
	}
	return `, attempts = mqlite_attempt(attempts, ` + at + `, ` + error + `, ` + worker + `)`
}

// promoteSQL builds the UPDATE that makes due scheduled messages active.
func promoteSQL(where string) string {
	return `UPDATE mqlite_messages SET state = 'active' WHERE ` + where
}

// everyQueue scopes a sweep to the rows of every queue through the queue
// column, so that the planner seeks the sweep's partial index (queue, ...)
// once per queue instead of scanning it.
const everyQueue = `queue IN (SELECT name FROM mqlite_queues)`

// The sweeps over every queue: ?1 is now, ?2 the batch size.
var (
	// reapAllSQL is reapExpiredSQL over every queue, one batch.
	reapAllSQL = release{MaxDelivery: rowMaxDelivery, Now: "?1", Desc: descLeaseExpired, Back: "'active'",
		Error: leaseExpired, Worker: "''",
		Where: `id IN (SELECT id FROM mqlite_messages WHERE ` + everyQueue + ` AND state = 'locked' AND locked_until <= ?1 LIMIT ?2)`}.sql()
	// promoteAllSQL is promoteDueSQL over every queue, one batch.
	promoteAllSQL = promoteSQL(
		`id IN (SELECT id FROM mqlite_messages WHERE ` + everyQueue + ` AND state = 'scheduled' AND visible_at <= ?1 LIMIT ?2)`)
	// recoverSQL releases every lease, expired or not: at Open each one is an
	// orphan of a process that has ended (the file lock proves no other
	// process holds the file). ?1 is now; there is no batch.
	recoverSQL = release{MaxDelivery: rowMaxDelivery, Now: "?1", Desc: descRecovered, Back: "'active'",
		Error: "'" + driver.AttemptRecovered + "'", Worker: "''",
		Where: everyQueue + ` AND state = 'locked'`}.sql()
)

// expiredTTL picks one batch of messages whose time to live has passed and
// that nobody holds (locked messages wait for their lease to end), on the
// queues that dead-letter expired messages (dl = 1) or not (dl = 0).
func expiredTTL(dl int) string {
	return fmt.Sprintf(`id IN (SELECT id FROM mqlite_messages
		WHERE expires_at > 0 AND expires_at <= ?1 AND (state = 'active' OR state = 'scheduled' OR state = 'deferred')
		  AND (SELECT dead_letter_on_ttl FROM mqlite_queues WHERE name = mqlite_messages.queue) = %d LIMIT ?2)`, dl)
}

// The TTL sweep: ?1 is now, ?2 the batch size.
var (
	// expireDeleteSQL removes expired messages of the queues that do not
	// keep them.
	expireDeleteSQL = `DELETE FROM mqlite_messages WHERE ` + expiredTTL(0)
	// expireDeadLetterSQL dead-letters expired messages of the queues with
	// dead_letter_on_ttl.
	expireDeadLetterSQL = `UPDATE mqlite_messages SET state = 'dead_lettered',
		dead_letter_reason = '` + ReasonTTL + `', dead_letter_desc = '` + descTTL + `',
		dead_lettered_at = ?1, lock_token = ` + noToken + `, locked_until = 0
		WHERE ` + expiredTTL(1)
)

// janitorSQL deletes one batch of the rows whose replay window has passed
// (?1 is now, ?2 the batch size): settlement receipts, receive attempts
// and the broker's commit records
// (CompactReceipts does the completed messages, expireDedup the dedup keys). Replays check expiry at statement time, so these rows are dead
// weight, never a behaviour. Each statement is its own short write, so the
// janitor never holds the connection for long, however much expired at once.
var janitorSQL = []string{
	// Receipts lead with seq and are written in about seq order, so the
	// expired ones sit at the front: a batch reads the first rows in key
	// order and deletes the expired among them. A batch that deletes none
	// ends the sweep; receipts of long-held deliveries that have not
	// expired yet stay at the front until they do (at most ReceiptTTLMS).
	`DELETE FROM mqlite_settlement_receipts WHERE (seq, lock_token, operation, args) IN (
		SELECT seq, lock_token, operation, args FROM mqlite_settlement_receipts ORDER BY seq LIMIT ?2)
	   AND expires_at <= ?1`,
	`DELETE FROM mqlite_receive_attempts WHERE id IN (
		SELECT id FROM mqlite_receive_attempts WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`,
	`DELETE FROM mqlite_commits WHERE id IN (
		SELECT id FROM mqlite_commits WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`,
}

// dedupChunkBytes bounds the bytes of the dedup rows one statement of the
// walk deletes among, so that a chunk spans about as many leaf pages
// (PageSize each) whatever the length of its keys: SweepBatch short keys,
// fewer long MessageIDs (up to 256 bytes each).
const dedupChunkBytes = 32 * PageSize

// dedupRowBytes is the size of a dedup row in its leaf, as SQL: the key's
// columns, the content key and about 24 bytes of the seq, the expiry and
// the cell's header.
const dedupRowBytes = `octet_length(queue) + octet_length(key) + coalesce(octet_length(content_key), 0) + 24`

// dedupChunkEndSQL finds where the chunk of dedup keys that starts at the
// cursor (?1, ?2) ends: the first key, after the chunk's first, at which
// the rows from the cursor add up to more than ?4 bytes (dedupChunkBytes),
// or the key ?3 (SweepBatch) places further in key order, whichever comes
// first; it opens the next chunk. No row: the rest of the table is the
// last chunk.
const dedupChunkEndSQL = `SELECT queue, key FROM (
	SELECT queue, key, row_number() OVER w AS n, sum(` + dedupRowBytes + `) OVER w AS bytes FROM (
		SELECT queue, key, content_key FROM mqlite_dedup
		WHERE (queue, key) >= (?1, ?2) ORDER BY queue, key LIMIT ?3 + 1)
	WINDOW w AS (ORDER BY queue, key ROWS UNBOUNDED PRECEDING))
	WHERE n > 1 AND (bytes > ?4 OR n = ?3 + 1) ORDER BY n LIMIT 1`

// dedupExpireSQL deletes the expired keys of one chunk, from (?2, ?3) to
// (?4, ?5) exclusive; ?1 is now.
const dedupExpireSQL = `DELETE FROM mqlite_dedup
	WHERE (queue, key) >= (?2, ?3) AND (queue, key) < (?4, ?5) AND expires_at <= ?1`

// dedupExpireLastSQL deletes the expired keys from (?2, ?3) on: the last
// chunk.
const dedupExpireLastSQL = `DELETE FROM mqlite_dedup WHERE (queue, key) >= (?2, ?3) AND expires_at <= ?1`

// expireDedup walks the dedup keys in key order, one chunk of at most
// SweepBatch keys and dedupChunkBytes per statement, and deletes the
// expired ones. Keys in key order share
// leaves, so a chunk rewrites a few dozen pages; the same number of keys
// picked by expiry would sit on as many random leaves as keys (content keys
// are hashes): a million of them took seconds and tens of MiB of WAL. The
// walk reads every key once per run, one short statement at a time.
func expireDedup(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	var queue, key any = "", int64(0) // before every key: queue names are not empty
	for {
		var endQueue, endKey any
		err := db.QueryRowContext(ctx, dedupChunkEndSQL, queue, key, SweepBatch, dedupChunkBytes).Scan(&endQueue, &endKey)
		last := errors.Is(err, sql.ErrNoRows)
		if err != nil && !last {
			return total, err
		}
		query, args := dedupExpireSQL, []any{now, queue, key, endQueue, endKey}
		if last {
			query, args = dedupExpireLastSQL, args[:3]
		}
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if last || (stop != nil && stop()) {
			return total, nil
		}
		queue, key = endQueue, endKey
	}
}

// batched runs query with (now, SweepBatch) until a batch changes fewer rows
// than SweepBatch or stop reports true, and returns the rows changed.
func batched(ctx context.Context, db DBTX, query string, now int64, stop func() bool) (int64, error) {
	return batchedUntil(ctx, db, query, now, stop, SweepBatch)
}

// batchedUntil is batched that goes on while a batch changes at least
// the given number of rows.
func batchedUntil(ctx context.Context, db DBTX, query string, now int64, stop func() bool, least int64) (int64, error) {
	var total int64
	for {
		res, err := db.ExecContext(ctx, query, now, SweepBatch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < least || (stop != nil && stop()) {
			return total, nil
		}
	}
}

// Reap releases the expired leases of every queue: back to active, or to
// the dead letters after the last allowed delivery. stop (may be nil) is
// asked between batches whether to give up early.
func Reap(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	n, err := batched(ctx, db, reapAllSQL, now, stop)
	if err != nil {
		return n, fmt.Errorf("reap: %w", err)
	}
	return n, nil
}

// Promote makes the due scheduled messages of every queue active.
func Promote(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	n, err := batched(ctx, db, promoteAllSQL, now, stop)
	if err != nil {
		return n, fmt.Errorf("promote: %w", err)
	}
	return n, nil
}

// Expire applies time to live: expired messages that nobody holds are
// removed, or dead-lettered (reason ReasonTTL) on the queues that ask
// for it.
func Expire(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	for _, q := range []string{expireDeadLetterSQL, expireDeleteSQL} {
		n, err := batched(ctx, db, q, now, stop)
		total += n
		if err != nil {
			return total, fmt.Errorf("expire: %w", err)
		}
	}
	return total, nil
}

// Janitor deletes expired settlement receipts, receive attempts, the
// broker's commit records and dedup keys, SweepBatch rows per statement, each statement its own transaction,
// so that claims and sends interleave with it. stop (may be nil) is asked
// between batches whether to give up early.
func Janitor(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	for i, q := range janitorSQL {
		least := int64(SweepBatch)
		if i == 0 {
			least = 1 // receipts: a batch deletes the expired among the first rows
		}
		n, err := batchedUntil(ctx, db, q, now, stop, least)
		total += n
		if err != nil {
			return total, fmt.Errorf("janitor: %w", err)
		}
	}
	n, err := expireDedup(ctx, db, now, stop)
	total += n
	if err != nil {
		return total, fmt.Errorf("janitor: %w", err)
	}
	return total, nil
}

// settled are the oldest ?2 completed messages settled at ?1 or before, by
// their own index.
var settled = `SELECT id FROM mqlite_messages INDEXED BY mqlite_msg_settled
	WHERE ` + settledBefore("?1") + ` ORDER BY settled_at LIMIT ?2`

// compactSQL writes the receipts of a batch of completed messages still in
// their replay window, then deletes the batch.
var compactSQL = [2]string{
	`INSERT OR REPLACE INTO mqlite_settlement_receipts (queue, seq, lock_token, operation, args, expires_at)
	SELECT queue, id, unhex(lock_token), 'complete', '', settled_at + ` + receiptTTL + `
	  FROM mqlite_messages WHERE id IN (` + settled + `) AND settled_at + ` + receiptTTL + ` > ?1`,
	`DELETE FROM mqlite_messages WHERE id IN (` + settled + `)`,
}

// CompactReceipts turns one batch (ReceiptBatch) of the messages that
// completions left completed by now (each row its completion's receipt)
// into receipt rows, inside
// tx, and returns how many it turned. A completed row is cheap to write
// (rewritten in its page) but keeps its page, where receipts pack about
// twenty to a page and deleting neighbouring rows frees theirs: the
// janitor turns them, oldest first, at each pass. One past its replay
// window goes without a receipt.
func CompactReceipts(ctx context.Context, tx DBTX, now int64) (int64, error) {
	if _, err := tx.ExecContext(ctx, compactSQL[0], now, ReceiptBatch); err != nil {
		return 0, fmt.Errorf("janitor: completed rows: %w", err)
	}
	res, err := tx.ExecContext(ctx, compactSQL[1], now, ReceiptBatch)
	if err != nil {
		return 0, fmt.Errorf("janitor: completed rows: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Recover releases every lease left in the file by an earlier process, with
// the reaper's rule: back to active, or to the dead letters when the
// delivery was the last one allowed, so a crash never buys a delivery. Run it
// at Open, before anything can claim.
func Recover(ctx context.Context, db DBTX, now int64) (int64, error) {
	res, err := db.ExecContext(ctx, recoverSQL, now)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
