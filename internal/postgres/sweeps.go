package postgres

import (
	"context"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
)

// The sweeps, which any number of processes may run at once on one
// database. Each batch is one statement whose CTE picks at most $2 rows
// FOR UPDATE SKIP LOCKED: a row another sweep (or a claim, a settlement)
// holds is left to it, and FOR UPDATE checks the WHERE again on the newest
// version of each row it locks, so a row another process moved since the
// statement's snapshot is not taken. The outer statement then changes
// exactly the rows locked, each once: two reapers never release one lease
// twice, and their counts add up to the rows moved. $1 is now, $2 the
// batch size; a sweep goes on while a batch is full and stop (may be nil)
// says go on.

// reapSQL releases one batch of leases lapsed by $1: back to active, or to
// the dead letters (ReasonMaxDelivery) when the delivery that lapsed was
// the last one its queue allows. The delivery was counted by its claim;
// the release counts nothing. Each lapse is a failed attempt, kept in
// histories of $3.
var reapSQL = `WITH lapsed AS (
	SELECT id FROM mqlite_messages WHERE state = 'locked' AND locked_until <= $1
	 LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE mqlite_messages m SET
	state = CASE WHEN m.delivery_count >= q.max_delivery_count THEN 'dead_lettered' ELSE 'active' END,
	dead_letter_reason = CASE WHEN m.delivery_count >= q.max_delivery_count THEN '` + driver.ReasonMaxDelivery + `' END,
	dead_letter_desc = CASE WHEN m.delivery_count >= q.max_delivery_count THEN '` + driver.DescLeaseExpired + `' END,
	dead_lettered_at = CASE WHEN m.delivery_count >= q.max_delivery_count THEN $1 ELSE 0 END,
	lock_token = DEFAULT, locked_until = 0` + attemptSet("$1", leaseExpired, "''", "$3") + `
FROM lapsed, mqlite_queues q
WHERE m.id = lapsed.id AND q.name = m.queue` + movedColumns("m.queue", "'locked'", "m.state", "m.body_len")

// promoteSQL makes one batch of the scheduled messages due by $1 active.
var promoteSQL = `WITH due AS (
	SELECT id FROM mqlite_messages WHERE state = 'scheduled' AND visible_at <= $1
	 LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE mqlite_messages m SET state = 'active' FROM due WHERE m.id = due.id` +
	movedColumns("m.queue", "'scheduled'", "m.state", "m.body_len")

// expiredSQL picks one batch of messages whose time to live passed by $1
// and that nobody holds (a locked message waits for its lease to end), on
// the queues that dead-letter expired messages (dl true) or not.
func expiredSQL(dl bool) string {
	return fmt.Sprintf(`SELECT m.id, m.state AS old FROM mqlite_messages m JOIN mqlite_queues q ON q.name = m.queue
	 WHERE m.expires_at > 0 AND m.expires_at <= $1 AND m.state IN ('active', 'scheduled', 'deferred')
	   AND q.dead_letter_on_ttl = %t
	 LIMIT $2 FOR UPDATE OF m SKIP LOCKED`, dl)
}

// The TTL sweep's two statements.
var (
	// expireDeleteSQL removes expired messages of the queues that do not
	// keep them.
	expireDeleteSQL = `WITH gone AS (` + expiredSQL(false) + `)
DELETE FROM mqlite_messages m USING gone WHERE m.id = gone.id` +
		movedColumns("m.queue", "gone.old", "NULL", "m.body_len")
	// expireDeadLetterSQL dead-letters expired messages (ReasonTTL) of
	// the queues with dead_letter_on_ttl.
	expireDeadLetterSQL = `WITH gone AS (` + expiredSQL(true) + `)
UPDATE mqlite_messages m SET state = 'dead_lettered',
	dead_letter_reason = '` + driver.ReasonTTL + `', dead_letter_desc = '` + driver.DescTTL + `',
	dead_lettered_at = $1, lock_token = DEFAULT, locked_until = 0
FROM gone WHERE m.id = gone.id` + movedColumns("m.queue", "gone.old", "m.state", "m.body_len")
)

// janitorSQL deletes one batch of the rows whose replay window has passed
// by $1: settlement receipts, receive attempts, the broker's commit
// records and dedup entries, each found by its expiry index. Replays check
// expiry at statement time, so these rows are dead weight, never a
// behaviour. A row being written by another transaction (SKIP LOCKED) is
// left for the next pass.
var janitorSQL = []string{
	`DELETE FROM mqlite_settlement_receipts WHERE (seq, lock_token, operation, args) IN (
		SELECT seq, lock_token, operation, args FROM mqlite_settlement_receipts
		 WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	`DELETE FROM mqlite_receive_attempts WHERE id IN (
		SELECT id FROM mqlite_receive_attempts WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	`DELETE FROM mqlite_commits WHERE id IN (
		SELECT id FROM mqlite_commits WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	`DELETE FROM mqlite_dedup WHERE (queue, kind, key) IN (
		SELECT queue, kind, key FROM mqlite_dedup WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
}

// sweep runs query with ($1 now, $2 SweepBatch) until a batch changes
// fewer rows than SweepBatch or stop reports true, and returns the rows
// changed.
func sweep(ctx context.Context, db driver.DBTX, op, query string, now int64, stop func() bool) (int64, error) {
	return batches(stop, driver.SweepBatch, func() (int64, error) {
		return changed(ctx, db, op, query, now, driver.SweepBatch)
	})
}

// Reap releases every lease lapsed by now: back to active, or to the dead
// letters after the last allowed delivery.
func (PostgreSQL) Reap(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	n := historyOf(db)
	return batches(stop, driver.SweepBatch, func() (int64, error) {
		return moved(ctx, db, "reap", reapSQL, now, driver.SweepBatch, n)
	})
}

// Promote makes every scheduled message due by now active.
func (PostgreSQL) Promote(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	return batches(stop, driver.SweepBatch, func() (int64, error) {
		return moved(ctx, db, "promote", promoteSQL, now, driver.SweepBatch)
	})
}

// Expire applies time to live: expired messages that nobody holds are
// removed, or dead-lettered (ReasonTTL) on the queues that ask for it.
func (PostgreSQL) Expire(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	for _, q := range []string{expireDeadLetterSQL, expireDeleteSQL} {
		n, err := batches(stop, driver.SweepBatch, func() (int64, error) {
			return moved(ctx, db, "expire", q, now, driver.SweepBatch)
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Janitor deletes expired settlement receipts, receive attempts, the
// broker's commit records and dedup entries, SweepBatch rows per
// statement, each statement its own transaction on a handle, so that
// claims and sends interleave with it.
func (PostgreSQL) Janitor(ctx context.Context, db driver.DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	for _, q := range janitorSQL {
		n, err := sweep(ctx, db, "janitor", q, now, stop)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// compactSQL turns one batch of the completed messages settled by $1,
// oldest first, into receipts: it deletes the rows and writes the receipt
// of each still in its replay window ($3, ReceiptTTLMS), as the row
// itself answered a retried Complete (its token, operation complete, no
// arguments). A receipt already there (the same completion) has its expiry
// rewritten. It returns how many rows it turned.
const compactSQL = `WITH batch AS (
	SELECT id FROM mqlite_messages WHERE settled_at IS NOT NULL AND settled_at <= $1
	 ORDER BY settled_at LIMIT $2 FOR UPDATE SKIP LOCKED),
gone AS (
	DELETE FROM mqlite_messages m USING batch WHERE m.id = batch.id
	RETURNING m.queue, m.id, m.lock_token, m.settled_at),
kept AS (
	INSERT INTO mqlite_settlement_receipts (queue, seq, lock_token, operation, args, expires_at)
	SELECT queue, id, decode(lock_token, 'hex'), 'complete', '', settled_at + $3 FROM gone
	 WHERE settled_at + $3 > $1
	ON CONFLICT (seq, lock_token, operation, args) DO UPDATE
	   SET queue = EXCLUDED.queue, expires_at = EXCLUDED.expires_at)
SELECT count(*) FROM gone`

// CompactReceipts turns one batch (ReceiptBatch) of the messages that
// completions left completed by now (each row its completion's receipt)
// into receipt rows, inside tx, and returns how many it turned. One past
// its replay window goes without a receipt.
func (PostgreSQL) CompactReceipts(ctx context.Context, tx driver.DBTX, now int64) (int64, error) {
	var n int64
	if err := tx.QueryRowContext(ctx, compactSQL, now, driver.ReceiptBatch, driver.ReceiptTTLMS).Scan(&n); err != nil {
		return 0, fmt.Errorf("janitor: completed rows: %w", err)
	}
	return n, nil
}
