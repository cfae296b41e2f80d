package engine

import (
	"context"
	"fmt"
)

// SweepBatch is how many rows one sweep statement changes at most. A sweep
// over a large backlog runs batch after batch, each its own short write, so
// claims and sends interleave with it instead of waiting behind one long
// statement.
const SweepBatch = 500

// Dead-letter reasons and descriptions written by the engine.
const (
	// DeadLetterTTL is the dead-letter reason of a message whose time to
	// live passed before it was consumed, on a queue that dead-letters
	// expired messages.
	DeadLetterTTL = "ttl expired"

	descLeaseExpired = "the lease of the last allowed delivery expired"
	descRecovered    = "the process holding the last allowed delivery ended"
	descTTL          = "the time to live passed before the message was consumed"
)

// rowMaxDelivery is the delivery limit of the row being updated, for the
// statements that span queues.
const rowMaxDelivery = `(SELECT max_delivery_count FROM queues WHERE name = messages.queue)`

// releaseSQL builds the UPDATE that ends deliveries: each row goes back to
// the state back (an SQL expression: 'active', or Abandon's choice of
// 'scheduled'), or to the dead letters (reason DeadLetterMaxDelivery) when
// the delivery that ended was the last one allowed. maxDelivery is the SQL
// expression of the row's limit, now that of the current time, desc the
// dead-letter description, set any further assignments and where picks the
// rows. The claim path, Abandon, the reaper sweep and recovery differ only
// in those.
func releaseSQL(maxDelivery, now, desc, back, set, where string) string {
	last := `delivery_count >= ` + maxDelivery
	return `UPDATE messages SET
	state = CASE WHEN ` + last + ` THEN 'dead_lettered' ELSE ` + back + ` END,
	dead_letter_reason = CASE WHEN ` + last + ` THEN '` + DeadLetterMaxDelivery + `' END,
	dead_letter_desc = CASE WHEN ` + last + ` THEN '` + desc + `' END,
	dead_lettered_at = CASE WHEN ` + last + ` THEN ` + now + ` ELSE 0 END,
	lock_token = NULL, locked_until = 0` + set + `
	WHERE ` + where
}

// promoteSQL builds the UPDATE that makes due scheduled messages active.
func promoteSQL(where string) string {
	return `UPDATE messages SET state = 'active' WHERE ` + where
}

// everyQueue scopes a sweep to the rows of every queue through the queue
// column, so that the planner seeks the sweep's partial index (queue, ...)
// once per queue instead of scanning it.
const everyQueue = `queue IN (SELECT name FROM queues)`

// The sweeps over every queue: ?1 is now, ?2 the batch size.
var (
	// ReapAllSQL is ReapExpiredSQL over every queue, one batch.
	ReapAllSQL = releaseSQL(rowMaxDelivery, "?1", descLeaseExpired, "'active'", "",
		`id IN (SELECT id FROM messages WHERE `+everyQueue+` AND state = 'locked' AND locked_until <= ?1 LIMIT ?2)`)
	// PromoteAllSQL is PromoteDueSQL over every queue, one batch.
	PromoteAllSQL = promoteSQL(
		`id IN (SELECT id FROM messages WHERE ` + everyQueue + ` AND state = 'scheduled' AND visible_at <= ?1 LIMIT ?2)`)
	// RecoverSQL releases every lease, expired or not: at Open each one is an
	// orphan of a process that has ended (the file lock proves no other
	// process holds the file). ?1 is now; there is no batch.
	RecoverSQL = releaseSQL(rowMaxDelivery, "?1", descRecovered, "'active'", "", everyQueue+` AND state = 'locked'`)
)

// expiredTTL picks one batch of messages whose time to live has passed and
// that nobody holds (locked messages wait for their lease to end), on the
// queues that dead-letter expired messages (dl = 1) or not (dl = 0).
func expiredTTL(dl int) string {
	return fmt.Sprintf(`id IN (SELECT id FROM messages
		WHERE expires_at > 0 AND expires_at <= ?1 AND state IN ('active', 'scheduled', 'deferred')
		  AND (SELECT dead_letter_on_ttl FROM queues WHERE name = messages.queue) = %d LIMIT ?2)`, dl)
}

// The TTL sweep: ?1 is now, ?2 the batch size.
var (
	// ExpireDeleteSQL removes expired messages of the queues that do not
	// keep them.
	ExpireDeleteSQL = `DELETE FROM messages WHERE ` + expiredTTL(0)
	// ExpireDeadLetterSQL dead-letters expired messages of the queues with
	// dead_letter_on_ttl.
	ExpireDeadLetterSQL = `UPDATE messages SET state = 'dead_lettered',
		dead_letter_reason = '` + DeadLetterTTL + `', dead_letter_desc = '` + descTTL + `',
		dead_lettered_at = ?1, lock_token = NULL, locked_until = 0
		WHERE ` + expiredTTL(1)
)

// JanitorSQL deletes the rows whose replay window has passed (?1 is now):
// settlement receipts, receive attempts and dedup keys. Replays check expiry
// at statement time, so these rows are dead weight, never a behaviour.
var JanitorSQL = []string{
	`DELETE FROM settlement_receipts WHERE expires_at <= ?1`,
	`DELETE FROM receive_attempts WHERE expires_at <= ?1`,
	`DELETE FROM dedup WHERE expires_at <= ?1`,
}

// batched runs query with (now, SweepBatch) until a batch changes fewer rows
// than SweepBatch or stop reports true, and returns the rows changed.
func batched(ctx context.Context, db DBTX, query string, now int64, stop func() bool) (int64, error) {
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
		if n < SweepBatch || (stop != nil && stop()) {
			return total, nil
		}
	}
}

// Reap releases the expired leases of every queue: back to active, or to
// the dead letters after the last allowed delivery. stop (may be nil) is
// asked between batches whether to give up early.
func Reap(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	n, err := batched(ctx, db, ReapAllSQL, now, stop)
	if err != nil {
		return n, fmt.Errorf("reap: %w", err)
	}
	return n, nil
}

// Promote makes the due scheduled messages of every queue active.
func Promote(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	n, err := batched(ctx, db, PromoteAllSQL, now, stop)
	if err != nil {
		return n, fmt.Errorf("promote: %w", err)
	}
	return n, nil
}

// Expire applies time to live: expired messages that nobody holds are
// removed, or dead-lettered (reason DeadLetterTTL) on the queues that ask
// for it.
func Expire(ctx context.Context, db DBTX, now int64, stop func() bool) (int64, error) {
	var total int64
	for _, q := range []string{ExpireDeadLetterSQL, ExpireDeleteSQL} {
		n, err := batched(ctx, db, q, now, stop)
		total += n
		if err != nil {
			return total, fmt.Errorf("expire: %w", err)
		}
	}
	return total, nil
}

// Janitor deletes expired settlement receipts, receive attempts and dedup
// keys. The tables have no index on expiry (their keys serve the replays),
// so each statement reads its table once; it runs once a minute by default.
func Janitor(ctx context.Context, db DBTX, now int64) (int64, error) {
	var total int64
	for _, q := range JanitorSQL {
		res, err := db.ExecContext(ctx, q, now)
		if err != nil {
			return total, fmt.Errorf("janitor: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// Recover releases every lease left in the file by an earlier process, with
// the reaper's rule: back to active, or to the dead letters when the
// delivery was the last one allowed, so a crash never buys a delivery. Run it
// at Open, before anything can claim.
func Recover(ctx context.Context, db DBTX, now int64) (int64, error) {
	res, err := db.ExecContext(ctx, RecoverSQL, now)
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
