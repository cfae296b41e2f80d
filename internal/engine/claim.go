package engine

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// returning is the columns of a Row. A body kept out of the row is read
// from message_bodies by its rowid.
const returning = `id, state, delivery_count, enqueued_at, expires_at, visible_at, coalesce(message_id, ''),
	group_id, coalesce(subject, ''), coalesce(properties, ''),
	coalesce(body, (SELECT mb.body FROM mqlite_message_bodies mb WHERE mb.id = mqlite_messages.id)),
	CASE WHEN state = 'locked' THEN lock_token ELSE '' END, locked_until,
	coalesce(dead_letter_reason, ''), coalesce(dead_letter_desc, ''), dead_lettered_at, coalesce(last_error, ''), priority, attempts`

// scanRow reads one row of returning (driver.ScanRow).
func scanRow(s scanner) (Row, error) { return driver.ScanRow(s) }

// withAttempts decodes the history attempts read beside row c (NULL for
// none, the row of a message that never failed) into c.Attempts, unless
// the scan failed with err.
func withAttempts(c *Row, attempts sql.NullString, err error) error {
	if err != nil || !attempts.Valid {
		return err
	}
	c.Attempts, err = driver.ParseAttempts(attempts.String)
	return err
}

// claimedColumns is returning without what a claim of one message sets to
// values it knows (state, lock_token, locked_until): scanClaimed fills those
// in, which spares the statement three columns of its RETURNING table.
const claimedColumns = `id, delivery_count, enqueued_at, expires_at, visible_at, coalesce(message_id, ''),
	group_id, coalesce(subject, ''), coalesce(properties, ''),
	coalesce(body, (SELECT mb.body FROM mqlite_message_bodies mb WHERE mb.id = mqlite_messages.id)),
	coalesce(dead_letter_reason, ''), coalesce(dead_letter_desc, ''), dead_lettered_at, coalesce(last_error, ''), priority, attempts`

// scanClaimed scans claimedColumns of a message locked under token until
// the lease end until.
func scanClaimed(s scanner, token string, until int64) (Row, error) {
	c := Row{State: "locked", LockToken: token, LockedUntil: until}
	var gid, attempts sql.NullString
	err := s.Scan(&c.Seq, &c.DeliveryCount, &c.EnqueuedAt, &c.ExpiresAt, &c.VisibleAt,
		&c.MessageID, &gid, &c.Subject, &c.Properties, &c.Body,
		&c.DeadLetterReason, &c.DeadLetterDescription, &c.DeadLetteredAt, &c.LastError, &c.Priority, &attempts)
	if gid.Valid {
		c.GroupID = &gid.String
	}
	return c, withAttempts(&c, attempts, err)
}

// newToken returns a fresh lock token (driver.NewToken), the form of
// lower(hex(randomblob(16))).
var newToken = driver.NewToken

// eligible is the WHERE of the claim's candidate (in priority order, then
// seq: mqlite_msg_active's order): the oldest active,
// unexpired, undelivered-past-the-limit message of the queue that is not
// held behind its group, and (the head-of-line probe, on the partial index
// of the members in flight) has no earlier message of its group locked,
// deferred or scheduled. The probe ignores lease expiry on purpose: a
// crashed consumer's group stays in order until the reaper puts its head
// back.
const eligible = `m.queue = ?1 AND m.state = 'active' AND m.held = 0
	AND (m.expires_at = 0 OR m.expires_at > ?2)
	AND m.delivery_count < ?3
	AND (m.group_id IS NULL OR NOT EXISTS (SELECT 1 FROM mqlite_messages b INDEXED BY mqlite_msg_group_flight
	              WHERE b.queue = m.queue AND b.group_id = m.group_id
	                AND ` + inFlight + ` AND b.id < m.id))`

// noToken is the lock_token of a message that holds no lease, as SQL: 32
// dashes, as long as a token (so that a claim rewrites the row at the same
// size, in place) and never one (a token is hex). Every statement that ends a
// lease writes it back.
const noToken = `'--------------------------------'`

// lockSet is what a claim writes: the lease, a fresh 128-bit token
// (SQLite's randomblob, seeded by the OS; claimOneSQL binds one from Go) and
// one more delivery. ?4 is the queue's lock duration.
const lockSet = `SET state = 'locked', locked_until = ?2 + ?4, lock_token = lower(hex(randomblob(16))),
	    delivery_count = delivery_count + 1`

// claimSQL is the peek-lock claim: one atomic statement that picks the
// oldest ?5 claimable messages and locks them. A group contributes at most
// its front: every later member is held, so one statement can never hand
// out two messages of a group.
const claimSQL = `UPDATE mqlite_messages ` + lockSet + `
	WHERE id IN (SELECT m.id FROM mqlite_messages m WHERE ` + eligible + ` ORDER BY m.priority DESC, m.id LIMIT ?5 + 0)
	RETURNING ` + returning

// claimOneSQL is claimSQL for a single message, the most common call: the
// head is found by a scalar subquery instead of an IN list, which saves
// SQLite a temporary table, and the token ?6 comes from Go (newToken) so
// that the statement returns only claimedColumns.
const claimOneSQL = `UPDATE mqlite_messages SET state = 'locked', locked_until = ?2 + ?4, lock_token = ?6,
	    delivery_count = delivery_count + 1
	WHERE id = (SELECT m.id FROM mqlite_messages m WHERE ` + eligible + ` ORDER BY m.priority DESC, m.id LIMIT ?5 + 0)
	RETURNING ` + claimedColumns

// hotClaimOne is claimOneSQL on the hot path (hot.go).
var hotClaimOne = hot(claimOneSQL)

// claimDeleteSQL is the receive-and-delete claim: the row leaves in the same
// statement, so there is no lease and no token.
const claimDeleteSQL = `DELETE FROM mqlite_messages
	WHERE id IN (SELECT m.id FROM mqlite_messages m WHERE ` + eligible + ` ORDER BY m.priority DESC, m.id LIMIT ?5 + 0)
	RETURNING ` + returning

// sizeSQL is the size of message m as Config.MaxMessageBytes counts it
// (SendMessage.Size): its body and its metadata.
const sizeSQL = `m.body_len + coalesce(octet_length(m.message_id), 0) + coalesce(octet_length(m.group_id), 0)
	+ coalesce(octet_length(m.subject), 0) + coalesce(octet_length(m.properties), 0)`

// budgetSQL is the candidates of a claim with a byte budget ?6: of the
// first ?5 claimable messages, in claim order (priority, then sequence), the first whatever its
// size, and after it those whose sizes add up, with all before them, to at
// most ?6. The running sum is taken over the ?5 candidates only.
const budgetSQL = `SELECT id FROM (
	SELECT id, row_number() OVER w AS n, sum(size) OVER w AS total FROM (
		SELECT m.id, m.priority, ` + sizeSQL + ` AS size FROM mqlite_messages m WHERE ` + eligible + ` ORDER BY m.priority DESC, m.id LIMIT ?5 + 0)
	WINDOW w AS (ORDER BY priority DESC, id ROWS UNBOUNDED PRECEDING))
	WHERE n = 1 OR total <= ?6`

// claimBudgetSQL and claimDeleteBudgetSQL are claimSQL and claimDeleteSQL
// with a byte budget (ClaimRequest.MaxBytes).
const (
	claimBudgetSQL = `UPDATE mqlite_messages ` + lockSet + `
	WHERE id IN (` + budgetSQL + `)
	RETURNING ` + returning
	claimDeleteBudgetSQL = `DELETE FROM mqlite_messages
	WHERE id IN (` + budgetSQL + `)
	RETURNING ` + returning
)

// The claims of several messages on the hot path (hot.go).
var (
	hotClaim             = hot(claimSQL)
	hotClaimDelete       = hot(claimDeleteSQL)
	hotClaimBudget       = hot(claimBudgetSQL)
	hotClaimDeleteBudget = hot(claimDeleteBudgetSQL)
)

// promoteDueSQL makes the queue's due scheduled messages active. The
// scheduler sweep runs the same statement over every queue (promoteAllSQL).
var promoteDueSQL = promoteSQL(`queue = ?1 AND state = 'scheduled' AND visible_at <= ?2`)

// reapExpiredSQL puts the queue's expired leases back: to active, or to the
// dead letters when the delivery that expired was the last one allowed. The
// reaper sweep (reapAllSQL) and recovery (recoverSQL) are the same statement
// over other rows.
var reapExpiredSQL = release{MaxDelivery: "?3", Now: "?2", Desc: descLeaseExpired, Back: "'active'",
	Error: leaseExpired, Worker: "''",
	Where: `queue = ?1 AND state = 'locked' AND locked_until <= ?2`}.sql()

// claimRequest names the options of a Receive that a replay must repeat
// (driver.AttemptRequest).
var claimRequest = driver.AttemptRequest

// Claim runs one Receive inside tx: it replays a recorded attempt, or makes
// due messages and expired leases claimable, then claims up to Max messages,
// and records the attempt. The caller commits.
func Claim(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error) {
	q := r.Queue
	if r.AttemptID != "" {
		out, found, err := replay(ctx, tx, r)
		if found || err != nil {
			return out, err
		}
	}
	// Due messages and lapsed leases of this queue become claimable first,
	// so an expired group head is handed out again before its successors
	// and no claim waits for a background sweep.
	if !r.Bounds.Quiet(q.Name, r.Now) {
		if err := makeClaimable(ctx, tx, q, r.Now, r.Bounds); err != nil {
			return nil, err
		}
	}
	out, err := claimUpTo(ctx, tx, r)
	if err != nil {
		return nil, err
	}
	if r.AttemptID != "" && len(out) > 0 {
		// An empty result is not recorded: a retry may find messages.
		blob, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("record attempt: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO mqlite_receive_attempts
			(queue, attempt_id, request, result, expires_at) VALUES (?, ?, ?, ?, ?)`,
			q.Name, r.AttemptID, claimRequest(r), blob, r.Now+ReceiptTTLMS); err != nil {
			return nil, fmt.Errorf("record attempt: %w", err)
		}
	}
	return out, nil
}

// replay answers a Receive whose AttemptID has a live record on its queue.
// The same request gets what the attempt handed out, less what is no longer
// handed out under it: a peek-lock message settled, reclaimed or past its
// lease since is left out, so a replay never presents a message as
// deliverable when it is not (receive-and-delete messages are gone from the
// table and come back as recorded). Other options under the same id are
// errs.ErrAttemptConflict. found is false when there is no live record.
func replay(ctx context.Context, tx DBTX, r ClaimRequest) (out []Row, found bool, err error) {
	var req string
	var blob []byte
	err = tx.QueryRowContext(ctx, `SELECT request, result FROM mqlite_receive_attempts
		WHERE queue = ? AND attempt_id = ? AND expires_at > ?`, r.Queue.Name, r.AttemptID, r.Now).Scan(&req, &blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("replay attempt: %w", err)
	}
	if req != claimRequest(r) {
		return nil, true, fmt.Errorf("%w: attempt %q was %s, this Receive is %s",
			errs.ErrAttemptConflict, r.AttemptID, req, claimRequest(r))
	}
	if err := json.Unmarshal(blob, &out); err != nil {
		return nil, true, fmt.Errorf("replay attempt: %w", err)
	}
	if r.Delete || len(out) == 0 {
		return out, true, nil
	}
	held, err := stillHeld(ctx, tx, r.Queue.Name, out, r.Now)
	if err != nil {
		return nil, true, err
	}
	return driver.KeepHeld(out, held), true, nil
}

// stillHeldSQL finds which of the deliveries in the JSON array ?1 still hold
// their lease: the row locked under the same token, the lease running.
const stillHeldSQL = `SELECT m.id, m.locked_until FROM json_each(?1) l
	CROSS JOIN mqlite_messages m ON m.id = l.value ->> 's'
	WHERE m.queue = ?2 AND m.lock_token = l.value ->> 't' AND m.state = 'locked' AND m.locked_until > ?3`

// stillHeld returns the lease end of each of rows that is still held.
func stillHeld(ctx context.Context, tx DBTX, queue string, rows []Row, now int64) (map[int64]int64, error) {
	refs := make([]lockRef, len(rows))
	for i, m := range rows {
		refs[i] = lockRef{Queue: queue, Seq: m.Seq, Token: m.LockToken}
	}
	list, err := json.Marshal(refs)
	if err != nil {
		return nil, fmt.Errorf("replay attempt: %w", err)
	}
	res, err := tx.QueryContext(ctx, stillHeldSQL, string(list), queue, now)
	if err != nil {
		return nil, fmt.Errorf("replay attempt: %w", err)
	}
	defer res.Close()
	held := map[int64]int64{}
	for res.Next() {
		var seq, until int64
		if err := res.Scan(&seq, &until); err != nil {
			return nil, fmt.Errorf("replay attempt: %w", err)
		}
		held[seq] = until
	}
	return held, res.Err()
}

// claimUpTo claims up to r.Max messages in one statement and returns them
// in sequence order.
func claimUpTo(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error) {
	q := r.Queue
	if r.Max == 1 && !r.Delete {
		return claimOne(ctx, tx, r)
	}
	query := hotClaim
	args := []any{q.Name, r.Now, q.MaxDeliveryCount, q.LockDurationMS, r.Max}
	budget := r.MaxBytes > 0 && r.Max > 1 // one message needs no budget: it always comes
	switch {
	case r.Delete && budget:
		query = hotClaimDeleteBudget
	case r.Delete:
		query = hotClaimDelete
	case budget:
		query = hotClaimBudget
	}
	if budget {
		args = append(args, r.MaxBytes)
	}
	var out []Row
	if err := query.each(ctx, tx, args, func(row scanner) error {
		c, err := scanRow(row)
		if err != nil {
			return err
		}
		if r.Delete {
			// RETURNING shows the deleted row as it was: count this delivery.
			c.State, c.LockToken, c.LockedUntil = "", "", 0
			c.DeliveryCount++
		}
		out = append(out, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	// In claim order: the highest priority first, then the lowest seq
	// (RETURNING gives the rows in the order the statement wrote them).
	slices.SortFunc(out, func(a, b Row) int { return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Seq, b.Seq)) })
	return out, nil
}

// claimOne is claimUpTo for one peek-lock message (claimOneSQL).
func claimOne(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error) {
	q := r.Queue
	token := newToken()
	c, err := scanClaimed(hotClaimOne.row(ctx, tx,
		q.Name, r.Now, q.MaxDeliveryCount, q.LockDurationMS, 1, token), token, r.Now+q.LockDurationMS)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return []Row{c}, nil
}

// dueProbeSQL reads the queue's earliest scheduled moment and earliest
// lease end (NULL for a state with no row): two index seeks, so that a claim
// pays for the two updates only when one of them has work, and learns how
// long nothing will be due.
const dueProbeSQL = `SELECT
	(SELECT min(visible_at) FROM mqlite_messages WHERE queue = ?1 AND state = 'scheduled'),
	(SELECT min(locked_until) FROM mqlite_messages WHERE queue = ?1 AND state = 'locked')`

// hotDueProbe is dueProbeSQL on the hot path (hot.go).
var hotDueProbe = hot(dueProbeSQL)

// MakeClaimable promotes the queue's due scheduled messages and reaps its
// expired leases. It writes nothing when nothing is due.
func MakeClaimable(ctx context.Context, tx DBTX, q Queue, now int64) error {
	return makeClaimable(ctx, tx, q, now, nil)
}

// makeClaimable is MakeClaimable that records in bounds (may be nil) until
// when nothing of the queue is due.
func makeClaimable(ctx context.Context, tx DBTX, q Queue, now int64, bounds *DueBounds) error {
	var sched, locked sql.NullInt64
	if err := hotDueProbe.row(ctx, tx, q.Name).Scan(&sched, &locked); err != nil {
		return fmt.Errorf("probe due: %w", err)
	}
	due := sched.Valid && sched.Int64 <= now
	lapsed := locked.Valid && locked.Int64 <= now
	if due {
		if _, err := tx.ExecContext(ctx, promoteDueSQL, q.Name, now); err != nil {
			return fmt.Errorf("promote due: %w", err)
		}
	}
	if lapsed {
		if _, err := tx.ExecContext(ctx, reapExpiredSQL, q.Name, now, q.MaxDeliveryCount); err != nil {
			return fmt.Errorf("reap expired: %w", err)
		}
	}
	// What is left is due after now; without an update, at the earliest
	// of the two moments read.
	next := int64(math.MaxInt64)
	switch {
	case due || lapsed:
		next = now + 1
	default:
		if sched.Valid {
			next = min(next, sched.Int64)
		}
		if locked.Valid {
			next = min(next, locked.Int64)
		}
	}
	bounds.Set(q.Name, next)
	return nil
}

// nextDueSQL reads the earliest due moment of the queue: two index seeks.
const nextDueSQL = `SELECT min(at) FROM (
	SELECT min(visible_at) AS at FROM mqlite_messages WHERE queue = ?1 AND state = 'scheduled'
	UNION ALL
	SELECT min(locked_until) FROM mqlite_messages WHERE queue = ?1 AND state = 'locked')`

// NextDue returns the earliest moment after now at which a message of the
// queue becomes claimable without a new send (a scheduled message falls due
// or a lease expires), or 0 when there is none.
func NextDue(ctx context.Context, db DBTX, queue string) (int64, error) {
	var next sql.NullInt64
	// The aggregate min skips the NULL of a state with no rows (the
	// two-argument scalar min would return NULL if either were empty).
	err := db.QueryRowContext(ctx, nextDueSQL, queue).Scan(&next)
	if err != nil {
		return 0, fmt.Errorf("next due: %w", err)
	}
	return next.Int64, nil
}

// ClaimDeferred locks the deferred message seq of the queue.
func ClaimDeferred(ctx context.Context, tx DBTX, q Queue, seq, now int64) (Row, error) {
	c, err := scanRow(tx.QueryRowContext(ctx, `UPDATE mqlite_messages `+lockSet+`
		WHERE id = ?5 AND queue = ?1 AND state = 'deferred' AND delivery_count < ?3
		  AND (expires_at = 0 OR expires_at > ?2)
		RETURNING `+returning, q.Name, now, q.MaxDeliveryCount, q.LockDurationMS, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, spendDeferred(ctx, tx, q, seq, now)
	}
	if err != nil {
		return Row{}, fmt.Errorf("receive deferred: %w", err)
	}
	return c, nil
}

// spendDeferred dead-letters the deferred message seq when it was deferred
// on its last allowed delivery: handing it out again would exceed the limit,
// and nothing else would ever move it.
func spendDeferred(ctx context.Context, tx DBTX, q Queue, seq, now int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE mqlite_messages SET state = 'dead_lettered',
		dead_letter_reason = '`+ReasonMaxDelivery+`',
		dead_letter_desc = 'deferred on the last allowed delivery', dead_lettered_at = ?3
		WHERE id = ?2 AND queue = ?1 AND state = 'deferred' AND delivery_count >= ?4`,
		q.Name, seq, now, q.MaxDeliveryCount)
	if err != nil {
		return fmt.Errorf("receive deferred: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return ErrSpentDeferred
	}
	return fmt.Errorf("%w: no deferred message %d on %q", errs.ErrMessageNotFound, seq, q.Name)
}

// Peek reads up to r.Max messages of the queue from r.FromSeq on, in any
// state but dead_lettered, without locking them.
func Peek(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error) {
	return peek(ctx, db, r, "")
}

// PeekDeadLetters reads up to r.Max dead letters of the queue from
// r.FromSeq on.
func PeekDeadLetters(ctx context.Context, db DBTX, r PeekRequest) ([]Row, error) {
	return peek(ctx, db, r, "dead_lettered")
}

// peekSQL reads the rows of a window of ids (windowSQL): the rows of the
// queue's page, each by its rowid, and nothing else.
func peekSQL(window string) string {
	return `SELECT ` + returning + ` FROM mqlite_messages WHERE id IN (` + window + `) ORDER BY id`
}

func peek(ctx context.Context, db DBTX, r PeekRequest, state string) ([]Row, error) {
	window, err := windowSQL(state)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, peekSQL(window), r.Queue, r.FromSeq, r.Max)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	out, _, err := driver.PageRows(rows, r.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return out, nil
}
