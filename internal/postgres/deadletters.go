package postgres

import (
	"context"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
)

// The operator's moves: redrive, deliver now, purge and the dead letters'
// retention. Each statement is an UPDATE or DELETE whose WHERE names the
// state it moves the rows from. PostgreSQL locks each row it changes and,
// when another transaction changed the row first, waits for it and checks
// the WHERE again on the row's new version (READ COMMITTED): two processes
// running the same move at once, or a move beside a claim or a sweep, move
// each row once, and each counts only the rows it moved.

// Redrive puts dead letters of the queue back to active with their
// delivery count at zero and the dead-letter fields cleared: the seqs
// listed, or all of them when seqs is empty. A message whose time to live
// has passed comes back without one (it would expire again at once). A
// grouped message rejoins its group in id order with no flag to set: a
// claim takes it when no live member of its group comes before it and the
// group's front is not in flight (groupFree), so that it never overtakes a
// member in flight. It returns how many messages came back; seqs that are not
// dead letters of the queue are skipped.
func (PostgreSQL) Redrive(ctx context.Context, db driver.DBTX, queue string, seqs []int64, now int64) (int64, error) {
	const set = `UPDATE mqlite_messages SET state = 'active', delivery_count = 0, visible_at = $2,
		expires_at = CASE WHEN expires_at > 0 AND expires_at <= $2 THEN 0 ELSE expires_at END,
		dead_letter_reason = NULL, dead_letter_desc = NULL, dead_lettered_at = 0,
		lock_token = DEFAULT, locked_until = 0
		WHERE queue = $1 AND state = 'dead_lettered'`
	return updateSeqs(ctx, db, "redrive", set, "'dead_lettered'", queue, seqs, now)
}

// DeliverNow makes scheduled messages of the queue due now (an operator's
// call): the listed seqs, or all of them when seqs is empty, as the
// promotion of a due message does. It returns how many it changed; seqs
// that are not scheduled messages of the queue are skipped.
func (PostgreSQL) DeliverNow(ctx context.Context, db driver.DBTX, queue string, seqs []int64, now int64) (int64, error) {
	const set = `UPDATE mqlite_messages SET state = 'active', visible_at = $2 WHERE queue = $1 AND state = 'scheduled'`
	return updateSeqs(ctx, db, "deliver now", set, "'scheduled'", queue, seqs, now)
}

// updateSeqs runs the update set ($1 the queue, $2 now) on the listed
// seqs, or on every row it matches when seqs is empty, and returns the
// rows changed, each reported from the state old (SQL) it names.
func updateSeqs(ctx context.Context, db driver.DBTX, op, set, old, queue string, seqs []int64, now int64) (int64, error) {
	query, args := set, []any{queue, now}
	if len(seqs) > 0 {
		query, args = set+` AND id = ANY($3)`, append(args, seqs)
	}
	return moved(ctx, db, op, query+movedColumns("queue", old, "state", "body_len"), args...)
}

// changed runs a write and returns the rows it changed; op names it in
// an error.
func changed(ctx context.Context, db driver.DBTX, op, query string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return n, nil
}

// PurgeBatch deletes up to SweepBatch messages of the queue in state,
// lowest ids first, and returns how many it deleted; the caller repeats it
// until it deletes fewer. The ids are picked from the statement's snapshot
// and the DELETE checks queue and state again on each row it takes: a row
// a concurrent transaction moved out of state meanwhile stays.
func (PostgreSQL) PurgeBatch(ctx context.Context, db driver.DBTX, queue, state string) (int64, error) {
	return moved(ctx, db, "purge", `DELETE FROM mqlite_messages WHERE id IN (
		SELECT id FROM mqlite_messages WHERE queue = $1 AND state = $2 ORDER BY id LIMIT $3)
		AND queue = $1 AND state = $2`+gone, queue, state, driver.SweepBatch)
}

// PurgeSeqs deletes the messages of queue in state whose seq is one of
// seqs, and returns how many it deleted; the others are left as they are.
func (PostgreSQL) PurgeSeqs(ctx context.Context, db driver.DBTX, queue, state string, seqs []int64) (int64, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	return moved(ctx, db, "purge", `DELETE FROM mqlite_messages
		WHERE id = ANY($3) AND queue = $1 AND state = $2`+gone, queue, state, seqs)
}

// The retention statements over the dead letters of the queue $1, each one
// batch of at most $4 rows; the DELETE checks the state again on each row
// it takes, so a dead letter redriven meanwhile stays.
var (
	// retainAgeSQL deletes dead letters older than $2 at $3.
	retainAgeSQL = `DELETE FROM mqlite_messages WHERE id IN (
		SELECT id FROM mqlite_messages WHERE queue = $1 AND state = 'dead_lettered'
		   AND dead_lettered_at + $2 <= $3 ORDER BY id LIMIT $4)
		AND queue = $1 AND state = 'dead_lettered'` + gone
	// retainCountSQL deletes the oldest dead letters beyond the newest $2.
	// It names the rows to keep, not how many to delete: two processes
	// applying the bound at once never delete more than its excess.
	retainCountSQL = `DELETE FROM mqlite_messages WHERE id IN (
		SELECT id FROM mqlite_messages WHERE queue = $1 AND state = 'dead_lettered'
		 ORDER BY id DESC OFFSET $2 LIMIT $3)
		AND queue = $1 AND state = 'dead_lettered'` + gone
	// retainBytesSQL keeps the newest dead letters whose bodies fit in $2;
	// the running sum from the newest marks where the oldest start.
	retainBytesSQL = `DELETE FROM mqlite_messages WHERE id IN (
		SELECT id FROM (SELECT id, sum(body_len) OVER (ORDER BY id DESC) AS kept
		                  FROM mqlite_messages WHERE queue = $1 AND state = 'dead_lettered') k
		 WHERE kept > $2)
		AND queue = $1 AND state = 'dead_lettered'` + gone
)

// gone is what a DELETE of messages returns for moved: each row as it was,
// leaving.
var gone = movedColumns("queue", "state", "NULL", "body_len")

// Retain applies a queue's dead-letter retention: the dead letters older
// than DLQMaxAgeMS, then the oldest beyond DLQMaxCount, then the oldest
// whose bodies, counted from the newest, pass DLQMaxBytes are removed. A
// zero bound is unbounded. It writes nothing when every bound holds. stop
// (may be nil) is asked between batches.
func (PostgreSQL) Retain(ctx context.Context, db driver.DBTX, q driver.Queue, now int64, stop func() bool) (int64, error) {
	if q.DLQMaxAgeMS == 0 && q.DLQMaxCount == 0 && q.DLQMaxBytes == 0 {
		return 0, nil
	}
	op := "retention " + q.Name
	var total int64
	if q.DLQMaxAgeMS > 0 {
		n, err := batches(stop, driver.SweepBatch, func() (int64, error) {
			return moved(ctx, db, op, retainAgeSQL, q.Name, q.DLQMaxAgeMS, now, driver.SweepBatch)
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	if q.DLQMaxCount > 0 {
		n, err := batches(stop, driver.SweepBatch, func() (int64, error) {
			return moved(ctx, db, op, retainCountSQL, q.Name, q.DLQMaxCount, driver.SweepBatch)
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	if q.DLQMaxBytes > 0 && (stop == nil || !stop()) {
		n, err := moved(ctx, db, op, retainBytesSQL, q.Name, q.DLQMaxBytes)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// batches runs batch until it changes fewer than least rows or stop (may
// be nil) reports true, and returns the rows changed.
func batches(stop func() bool, least int64, batch func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := batch()
		total += n
		if err != nil || n < least || (stop != nil && stop()) {
			return total, err
		}
	}
}
