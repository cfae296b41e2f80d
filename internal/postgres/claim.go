package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// rowColumns is the columns of a driver.Row, in scanRow's order: what the
// SQLite engine returns for a claimed, peeked or dead-lettered message.
const rowColumns = `id, state, delivery_count, enqueued_at, expires_at, visible_at, coalesce(message_id, ''),
	group_id, coalesce(subject, ''), coalesce(properties, ''), coalesce(body, '\x'::bytea),
	CASE WHEN state = 'locked' THEN lock_token ELSE '' END, locked_until,
	coalesce(dead_letter_reason, ''), coalesce(dead_letter_desc, ''), dead_lettered_at, coalesce(last_error, ''), priority,
	attempts`

// scanRow scans rowColumns (driver.ScanRow).
func scanRow(s driver.Scanner) (driver.Row, error) { return driver.ScanRow(s) }

// noToken is the lock_token of a message that holds no lease, as SQL: 32
// dashes, as long as a token and never one (a token is hex).
const noToken = `'--------------------------------'`

// newTokenSQL is a fresh lock token drawn by the server for each row: the
// 122 random bits of a version 4 UUID as 32 lowercase hex digits, the
// form of driver.NewToken.
const newTokenSQL = `replace(gen_random_uuid()::text, '-', '')`

// The descriptions of the dead letters the message path writes.
const (
	descLeaseExpired = "the lease of the last allowed delivery expired"
	descAbandoned    = "abandoned on the last allowed delivery"
	descDeferred     = "deferred on the last allowed delivery"
)

// live is the condition of a message b that still counts in its group, word
// for word the WHERE of mqlite_msg_group_live.
const live = `b.state IN ('active', 'locked', 'deferred', 'scheduled')`

// inFlight is the condition of a member b in flight, word for word the
// WHERE of mqlite_msg_group_flight: locked, deferred, or scheduled after a
// delivery that ended with a delay.
const inFlight = `(b.state IN ('locked', 'deferred') OR (b.state = 'scheduled' AND b.delivery_count > 0))`

// candidates picks, in claim order (priority, then id), up to $3
// claimable messages of the queue $1 at now $2 with fewer deliveries than
// the queue allows, and locks their rows FOR UPDATE SKIP LOCKED: a row
// another transaction holds (another claimer, a settlement, a sweep) is
// passed over, never waited for, so claimers in any number of processes
// each take different rows and never deadlock. A row whose claim committed
// after this statement's snapshot is checked again as it is now (READ
// COMMITTED re-reads a row it locks), so it is no longer active and is
// skipped: no delivery is handed out twice, and delivery_count never
// passes the queue's MaxDeliveryCount.
//
// The queue's settings come from q (queueSettings), read by the statement
// itself: a setting another process changed counts from its commit on,
// and no round trip reads them first. A paused queue, or none of that
// name, fails the EXISTS, which names no column of m: the plan checks it
// once, before it reads any message (a one-time filter), so a paused
// queue's backlog is never scanned.
//
// A grouped message is claimable when no live member of its group has a
// lower id and no member is in flight. Sends into a group commit in id
// order (sendSQL's group lock), so any snapshot that sees a member sees
// every earlier one: two claimers can only both find the group's front
// claimable when it is the same row, which SKIP LOCKED gives to one.
const candidates = `SELECT m.id, m.priority, ` + sizeSQL + ` AS size FROM mqlite_messages m
	WHERE m.queue = $1 AND m.state = 'active'
	  AND (m.expires_at = 0 OR m.expires_at > $2)
	  AND EXISTS (SELECT 1 FROM q WHERE paused_at = 0)
	  AND m.delivery_count < (SELECT max_delivery_count FROM q)` + groupRule + `
	ORDER BY m.priority DESC, m.id
	LIMIT $3
	FOR UPDATE OF m SKIP LOCKED`

// queueSettings is the CTE q of the claim: the settings of the queue $1,
// one row, none when there is no such queue.
const queueSettings = `SELECT max_delivery_count, lock_duration_ms, paused_at FROM mqlite_queues WHERE name = $1`

// groupRule is the condition of candidates on a grouped message.
const groupRule = `
	  AND ` + groupFree

// groupFree is the condition, on the active message m, that its group
// lets a claim take it: no live member of its group before it, none in
// flight (a member sent with a delay, never delivered, holds nobody up).
// It is what SQLite's held flag says without the flag: a message redriven
// ahead of the front in flight waits until that one leaves or comes back
// to active (mqlite_group_rejoin and mqlite_group_handover). Peek, Busy
// and Oldest ask it too, so they agree with what a claim takes.
const groupFree = `(m.group_id IS NULL OR (
	       NOT EXISTS (SELECT 1 FROM mqlite_messages b WHERE b.queue = m.queue AND b.group_id = m.group_id
	                      AND ` + live + ` AND b.id < m.id)
	   AND NOT EXISTS (SELECT 1 FROM mqlite_messages b WHERE b.queue = m.queue AND b.group_id = m.group_id
	                      AND b.group_id IS NOT NULL AND ` + inFlight + `)))`

// sizeSQL is the size of message m as Config.MaxMessageBytes counts it
// (driver.SendMessage.Size): its body and its metadata.
const sizeSQL = `m.body_len + coalesce(octet_length(m.message_id), 0) + coalesce(octet_length(m.group_id), 0)
	+ coalesce(octet_length(m.subject), 0) + coalesce(octet_length(m.properties), 0)`

// budgetSQL keeps, of the candidates c in claim order, the first whatever
// its size (when $5: the claim's first message) and after it those whose
// sizes add up, with all before them, to at most $4. The others stay
// locked by this transaction until it ends, unclaimed.
const budgetSQL = `SELECT id AS pid FROM (
	SELECT id, row_number() OVER w AS n, sum(size) OVER w AS total FROM c
	WINDOW w AS (ORDER BY priority DESC, id ROWS UNBOUNDED PRECEDING)) t
	WHERE (n = 1 AND $5::boolean) OR total <= $4`

// dueMarker is the row a claim statement adds to what it claimed when a
// message of the queue $1 is due at $2 without being claimable yet: a
// scheduled message whose moment came, or a lease that lapsed. Its seq is
// 0, which no message has. The probe reads two index ranges; a claim that
// took its $3 messages skips it, as does a paused queue, or none (nothing
// is claimed from it). The CASE is what makes it skip: PostgreSQL orders
// the conditions of an AND by its own estimate of their cost, and put the
// count last, so both ranges were read on every claim; the branches of a
// CASE run only when reached, so a full claim pays for neither range
// (TestClaimSkipsTheDueProbeWhenFull). What is due then waits for the next
// claim that has room, or the sweeps.
const dueMarker = `SELECT 0::bigint, '', 0::bigint, 0::bigint, 0::bigint, 0::bigint, '', NULL::text, '', '',
	'\x'::bytea, '', 0::bigint, '', '', 0::bigint, '', 0::smallint, NULL::text
	WHERE CASE WHEN (SELECT count(*) FROM u) >= $3 THEN false
	           WHEN NOT EXISTS (SELECT 1 FROM q WHERE paused_at = 0) THEN false
	           ELSE EXISTS (SELECT 1 FROM mqlite_messages WHERE queue = $1 AND state = 'scheduled' AND visible_at <= $2)
	             OR EXISTS (SELECT 1 FROM mqlite_messages WHERE queue = $1 AND state = 'locked' AND locked_until <= $2) END`

// claimSQL is the peek-lock claim in one statement: the queue's settings
// (q), the candidates, then their lease (the queue's lock duration), a
// token drawn for each and one more delivery; or, receive-and-delete,
// their rows deleted. p names its ids pid, so that RETURNING reads the
// message's columns unqualified. The rows claimed come with dueMarker's
// row when something is due.
func claimSQL(candidates string, budget, del bool) string {
	pick := `SELECT id AS pid FROM c`
	if budget {
		pick = budgetSQL
	}
	write := `UPDATE mqlite_messages SET state = 'locked', locked_until = $2 + q.lock_duration_ms,
	lock_token = ` + newTokenSQL + `, delivery_count = delivery_count + 1
	FROM p, q WHERE id = pid RETURNING ` + rowColumns
	if del {
		write = `DELETE FROM mqlite_messages USING p WHERE id = pid RETURNING ` + rowColumns
	}
	return `WITH q AS (` + queueSettings + `), c AS (` + candidates + `), p AS (` + pick + `), u AS (` + write + `)
	SELECT * FROM u UNION ALL ` + dueMarker
}

// claimSQLs holds claimSQL for each combination of a byte budget and
// receive-and-delete.
var claimSQLs = claimSQLsOf(candidates)

// claimSQLsOf is claimSQLs of the candidates c.
func claimSQLsOf(c string) [2][2]string {
	return [2][2]string{
		{claimSQL(c, false, false), claimSQL(c, false, true)},
		{claimSQL(c, true, false), claimSQL(c, true, true)},
	}
}

// Claim runs one Receive inside tx: it replays a recorded attempt, or
// claims up to r.Max messages in one statement, and records the attempt.
// The caller commits. When that statement finds a message of the queue due
// (a scheduled message's moment came, a lease lapsed), Claim makes the
// queue's due messages claimable and claims what is left of r.Max among
// them: a Receive never waits for a sweep. A group whose front's lease
// lapsed stays in flight until then, so its next member never overtakes
// it. r.Bounds is not read: other processes write the queue, so no bound
// kept by this one holds. Of r.Queue only the name is read: each statement
// reads the queue's settings itself, claims nothing from a paused queue
// and nothing from a queue that does not exist (the caller tells those
// apart from an empty queue when it finds nothing).
//
// Without an AttemptID, tx may be a connection of the store's pool
// outside any transaction (the store's Receive on PostgreSQL): each
// statement then commits alone, which costs nothing here, since each is
// complete on its own. An AttemptID needs a transaction: its lock and its
// record go with the claim.
func (PostgreSQL) Claim(ctx context.Context, tx driver.DBTX, r driver.ClaimRequest) ([]driver.Row, error) {
	q := r.Queue
	if r.AttemptID != "" {
		// The attempt's lock makes a Receive that repeats the id while the
		// first still runs wait for it, then replay what it recorded: the
		// look runs in a statement after the lock, on a snapshot that
		// sees the first's commit.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+lockAttempt+`, hashtext($1 || chr(1) || $2))`,
			q.Name, r.AttemptID); err != nil {
			return nil, interpret("claim", err)
		}
		out, found, err := replay(ctx, tx, r)
		if found || err != nil {
			return out, err
		}
	}
	out, due, err := claimUpTo(ctx, tx, r, r.Max, r.MaxBytes, true)
	if err != nil {
		return nil, err
	}
	if due {
		if err := makeClaimable(ctx, tx, q, r.Now); err != nil {
			return nil, err
		}
		var used int64
		for _, c := range out {
			used += c.Size()
		}
		if left := r.MaxBytes - used; len(out) < r.Max && (r.MaxBytes == 0 || left > 0 || len(out) == 0) {
			more, _, err := claimUpTo(ctx, tx, r, r.Max-len(out), left, len(out) == 0)
			if err != nil {
				return nil, err
			}
			out = append(out, more...)
		}
	}
	slices.SortFunc(out, func(a, b driver.Row) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Seq, b.Seq))
	})
	if r.AttemptID != "" && len(out) > 0 {
		// An empty result is not recorded: a retry may find messages.
		blob, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("record attempt: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO mqlite_receive_attempts
			(queue, attempt_id, request, result, expires_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (queue, attempt_id) DO UPDATE SET request = excluded.request,
				result = excluded.result, expires_at = excluded.expires_at`,
			q.Name, r.AttemptID, driver.AttemptRequest(r), blob, r.Now+driver.ReceiptTTLMS); err != nil {
			return nil, interpret("record attempt", err)
		}
	}
	return out, nil
}

// claimUpTo runs the claim statement of r for up to max messages within
// the byte budget maxBytes (when r has one), the first of them whatever
// its size when first, and reports whether a message of the queue was due
// and not yet claimable.
func claimUpTo(ctx context.Context, tx driver.DBTX, r driver.ClaimRequest, max int, maxBytes int64, first bool) ([]driver.Row, bool, error) {
	q := r.Queue
	budget := r.MaxBytes > 0 && r.Max > 1 // one message needs no budget: it always comes
	query := claimSQLs[b2i(budget)][b2i(r.Delete)]
	args := []any{q.Name, r.Now, max}
	if budget {
		args = append(args, maxBytes, first)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, false, interpret("claim", err)
	}
	defer rows.Close()
	var out []driver.Row
	due := false
	rep := reporterOf(tx).by(driver.OpClaim)
	for rows.Next() {
		c, err := scanRow(rows)
		if err != nil {
			return nil, false, interpret("claim", err)
		}
		if c.Seq == 0 { // dueMarker
			due = true
			continue
		}
		if r.Delete {
			// RETURNING shows the deleted row as it was: count this delivery.
			c.State, c.LockToken, c.LockedUntil = "", "", 0
			c.DeliveryCount++
		}
		// Every candidate is active (candidates).
		rep.claimed(q.Name, "active", c.State, int64(len(c.Body)), c.DeliveryCount)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, interpret("claim", err)
	}
	if len(out) > 0 {
		rep.done()
	}
	return out, due, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// replay answers a Receive whose AttemptID has a live record on its queue,
// as the SQLite engine does: the same request gets what the attempt handed
// out, less the peek-lock messages no longer held under it (settled,
// reclaimed or past their lease), with their lease ends as they are now;
// other options under the same id are errs.ErrAttemptConflict. found is
// false when there is no live record.
func replay(ctx context.Context, tx driver.DBTX, r driver.ClaimRequest) (out []driver.Row, found bool, err error) {
	var req string
	var blob []byte
	err = tx.QueryRowContext(ctx, `SELECT request, result FROM mqlite_receive_attempts
		WHERE queue = $1 AND attempt_id = $2 AND expires_at > $3`, r.Queue.Name, r.AttemptID, r.Now).Scan(&req, &blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, interpret("replay attempt", err)
	}
	if want := driver.AttemptRequest(r); req != want {
		return nil, true, fmt.Errorf("%w: attempt %q was %s, this Receive is %s",
			errs.ErrAttemptConflict, r.AttemptID, req, want)
	}
	if err := json.Unmarshal(blob, &out); err != nil {
		return nil, true, fmt.Errorf("replay attempt: %w", err)
	}
	if r.Delete || len(out) == 0 {
		return out, true, nil
	}
	seqs, tokens := make([]int64, len(out)), make([]string, len(out))
	for i, m := range out {
		seqs[i], tokens[i] = m.Seq, m.LockToken
	}
	rows, err := tx.QueryContext(ctx, `SELECT m.id, m.locked_until
		FROM unnest($1::bigint[], $2::text[]) AS l(seq, token)
		JOIN mqlite_messages m ON m.id = l.seq
		WHERE m.queue = $3 AND m.lock_token = l.token AND m.state = 'locked' AND m.locked_until > $4`,
		seqs, tokens, r.Queue.Name, r.Now)
	if err != nil {
		return nil, true, interpret("replay attempt", err)
	}
	defer rows.Close()
	held := map[int64]int64{}
	for rows.Next() {
		var seq, until int64
		if err := rows.Scan(&seq, &until); err != nil {
			return nil, true, interpret("replay attempt", err)
		}
		held[seq] = until
	}
	if err := rows.Err(); err != nil {
		return nil, true, interpret("replay attempt", err)
	}
	return driver.KeepHeld(out, held), true, nil
}

// makeClaimableSQL promotes the queue $1's scheduled messages due by $2 and
// releases its leases lapsed by $2: back to active, or to the dead letters
// when the delivery that lapsed was the last one allowed (the queue's
// MaxDeliveryCount, read by the statement, as the claim reads it), each
// lapse a failed attempt kept in histories of $3. Each update
// takes its rows FOR UPDATE SKIP LOCKED: a row another transaction holds
// (a claimer that promoted or reaped it a moment ago, a settlement) is
// left to it, so claimers running this at once never wait on each other,
// and a row is changed once. Nothing due, nothing written.
var makeClaimableSQL = `WITH p AS (
	UPDATE mqlite_messages SET state = 'active' WHERE id IN (
		SELECT id FROM mqlite_messages WHERE queue = $1 AND state = 'scheduled' AND visible_at <= $2
		FOR UPDATE SKIP LOCKED)
	RETURNING queue, state, body_len),
r AS (` + releaseSQL("(SELECT max_delivery_count FROM mqlite_queues WHERE name = $1)", "$2", descLeaseExpired, `'active'`,
	attemptSet("$2", leaseExpired, "''", "$3"), `id IN (
		SELECT id FROM mqlite_messages WHERE queue = $1 AND state = 'locked' AND locked_until <= $2
		FOR UPDATE SKIP LOCKED)`) + ` RETURNING queue, state, body_len)
SELECT queue, 'scheduled', state, body_len FROM p UNION ALL SELECT queue, 'locked', state, body_len FROM r`

// releaseSQL is an UPDATE that ends deliveries: each row goes back to the
// state back, or to the dead letters (driver.ReasonMaxDelivery, desc) when
// the delivery that ended was the last one allowed (maxDelivery); set adds
// assignments (each starting with ", "). Every argument is SQL.
func releaseSQL(maxDelivery, now, desc, back, set, where string) string {
	last := `delivery_count >= ` + maxDelivery
	return `UPDATE mqlite_messages SET
	state = CASE WHEN ` + last + ` THEN 'dead_lettered' ELSE ` + back + ` END,
	dead_letter_reason = CASE WHEN ` + last + ` THEN '` + driver.ReasonMaxDelivery + `' END,
	dead_letter_desc = CASE WHEN ` + last + ` THEN '` + desc + `' END,
	dead_lettered_at = CASE WHEN ` + last + ` THEN ` + now + ` ELSE 0 END,
	lock_token = ` + noToken + `, locked_until = 0` + set + `
	WHERE ` + where
}

// MakeClaimable promotes q's due scheduled messages and reaps its lapsed
// leases (makeClaimableSQL); of q only its name is read.
func (PostgreSQL) MakeClaimable(ctx context.Context, tx driver.DBTX, q driver.Queue, now int64) error {
	return makeClaimable(ctx, tx, q, now)
}

func makeClaimable(ctx context.Context, tx driver.DBTX, q driver.Queue, now int64) error {
	if _, err := movedRows(ctx, tx, makeClaimableSQL, q.Name, now, historyOf(tx)); err != nil {
		return interpret("make claimable", err)
	}
	return nil
}

// NextDue returns the earliest moment a message of queue becomes claimable
// without another write (a scheduled message falls due or a lease lapses);
// 0 when none. Two index seeks.
func (PostgreSQL) NextDue(ctx context.Context, db driver.DBTX, queue string) (int64, error) {
	var next int64
	err := db.QueryRowContext(ctx, `SELECT coalesce(least(
		(SELECT min(visible_at) FROM mqlite_messages WHERE queue = $1 AND state = 'scheduled'),
		(SELECT min(locked_until) FROM mqlite_messages WHERE queue = $1 AND state = 'locked')), 0)`, queue).Scan(&next)
	if err != nil {
		return 0, interpret("next due", err)
	}
	return next, nil
}

// ClaimDeferred leases the deferred message seq of q at now. The update
// waits for a transaction that holds the row and then checks it again as it
// is, so two calls for one message hand it out once. A message deferred
// on its last allowed delivery is dead-lettered instead
// (driver.ErrSpentDeferred); any other seq is errs.ErrMessageNotFound.
func (PostgreSQL) ClaimDeferred(ctx context.Context, tx driver.DBTX, q driver.Queue, seq, now int64) (driver.Row, error) {
	c, err := scanRow(tx.QueryRowContext(ctx, `UPDATE mqlite_messages SET state = 'locked', locked_until = $2 + $4,
		lock_token = `+newTokenSQL+`, delivery_count = delivery_count + 1
		WHERE id = $5 AND queue = $1 AND state = 'deferred' AND delivery_count < $3
		  AND (expires_at = 0 OR expires_at > $2)
		RETURNING `+rowColumns, q.Name, now, q.MaxDeliveryCount, q.LockDurationMS, seq))
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Row{}, spendDeferred(ctx, tx, q, seq, now)
	}
	if err != nil {
		return driver.Row{}, interpret("receive deferred", err)
	}
	rep := reporterOf(tx)
	rep.claimed(q.Name, "deferred", c.State, int64(len(c.Body)), c.DeliveryCount)
	rep.done()
	return c, nil
}

// spendDeferred dead-letters the deferred message seq when it was deferred
// on its last allowed delivery: handing it out again would pass the limit,
// and nothing else would ever move it.
func spendDeferred(ctx context.Context, tx driver.DBTX, q driver.Queue, seq, now int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE mqlite_messages SET state = 'dead_lettered',
		dead_letter_reason = '`+driver.ReasonMaxDelivery+`',
		dead_letter_desc = '`+descDeferred+`', dead_lettered_at = $3
		WHERE id = $2 AND queue = $1 AND state = 'deferred' AND delivery_count >= $4`,
		q.Name, seq, now, q.MaxDeliveryCount)
	if err != nil {
		return interpret("receive deferred", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		rep := reporterOf(tx)
		rep.change(q.Name, "deferred", "dead_lettered", 0)
		rep.done()
		return driver.ErrSpentDeferred
	}
	return fmt.Errorf("%w: no deferred message %d on %q", errs.ErrMessageNotFound, seq, q.Name)
}
