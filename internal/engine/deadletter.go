package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mqlite/mqlite/internal/driver"
)

// Retain applies a queue's dead-letter retention: the dead letters older
// than DLQMaxAgeMS, then the oldest beyond DLQMaxCount, then the oldest
// whose bodies, counted from the newest, pass DLQMaxBytes are removed. A zero
// bound is unbounded. It reads the queue's dead letters and writes nothing
// when every bound holds.
func Retain(ctx context.Context, db DBTX, q Queue, now int64, stop func() bool) (int64, error) {
	if q.DLQMaxAgeMS == 0 && q.DLQMaxCount == 0 && q.DLQMaxBytes == 0 {
		return 0, nil
	}
	var count int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_messages
		WHERE queue = ?1 AND state = 'dead_lettered'`, q.Name).Scan(&count); err != nil {
		return 0, fmt.Errorf("retention %s: %w", q.Name, err)
	}
	if count == 0 {
		return 0, nil
	}
	var total int64
	run := func(query string, args ...any) (int64, error) {
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, fmt.Errorf("retention %s: %w", q.Name, err)
		}
		n, _ := res.RowsAffected()
		total += n
		return n, nil
	}
	if q.DLQMaxAgeMS > 0 {
		for {
			n, err := run(`DELETE FROM mqlite_messages WHERE id IN (SELECT id FROM mqlite_messages
				WHERE queue = ?1 AND state = 'dead_lettered' AND dead_lettered_at + ?2 <= ?3 LIMIT ?4)`,
				q.Name, q.DLQMaxAgeMS, now, SweepBatch)
			if err != nil {
				return total, err
			}
			count -= n
			if n < SweepBatch || (stop != nil && stop()) {
				break
			}
		}
	}
	if q.DLQMaxCount > 0 {
		for count > q.DLQMaxCount {
			n, err := run(`DELETE FROM mqlite_messages WHERE id IN (SELECT id FROM mqlite_messages
				WHERE queue = ?1 AND state = 'dead_lettered' ORDER BY id LIMIT ?2)`,
				q.Name, min(count-q.DLQMaxCount, SweepBatch))
			if err != nil {
				return total, err
			}
			count -= n
			if n == 0 || (stop != nil && stop()) {
				break
			}
		}
	}
	if q.DLQMaxBytes > 0 && count > 0 {
		// Keep the newest dead letters whose bodies fit in the bound; the
		// running sum from the newest marks where the oldest start.
		if _, err := run(`DELETE FROM mqlite_messages WHERE id IN (
			SELECT id FROM (SELECT id, sum(body_len) OVER (ORDER BY id DESC) AS kept
			                  FROM mqlite_messages WHERE queue = ?1 AND state = 'dead_lettered')
			 WHERE kept > ?2)`, q.Name, q.DLQMaxBytes); err != nil {
			return total, err
		}
	}
	return total, nil
}

// Redrive puts dead letters of the queue back to active with their delivery
// count at zero and the dead-letter fields cleared: the seqs listed, or all
// of them when seqs is empty. A message whose time to live has passed comes
// back without one (it would expire again at once). Grouped messages rejoin
// their group in order behind any member in flight (the group program
// mqlite_group_move, which mqlite_group_state runs). It returns how many
// messages came back; seqs that are not dead letters of the queue are
// skipped.
func Redrive(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error) {
	const set = `UPDATE mqlite_messages SET state = 'active', delivery_count = 0, visible_at = ?2,
		expires_at = CASE WHEN expires_at > 0 AND expires_at <= ?2 THEN 0 ELSE expires_at END,
		dead_letter_reason = NULL, dead_letter_desc = NULL, dead_lettered_at = 0,
		lock_token = ` + noToken + `, locked_until = 0
		WHERE queue = ?1 AND state = 'dead_lettered'`
	return updateSeqs(ctx, db, "redrive", set, queue, seqs, now)
}

// DeliverNow makes scheduled messages of the queue due now (an operator's
// call): the listed seqs, or all of them when seqs is empty, as the
// promotion of a due message does (the triggers keep group order). It
// returns how many it changed; seqs that are not scheduled messages of the
// queue are skipped.
func DeliverNow(ctx context.Context, db DBTX, queue string, seqs []int64, now int64) (int64, error) {
	const set = `UPDATE mqlite_messages SET state = 'active', visible_at = ?2 WHERE queue = ?1 AND state = 'scheduled'`
	return updateSeqs(ctx, db, "deliver now", set, queue, seqs, now)
}

// updateSeqs runs the update set (?1 the queue, ?2 now) on the listed seqs,
// or on every row it matches when seqs is empty, and returns the rows
// changed.
func updateSeqs(ctx context.Context, db DBTX, op, set, queue string, seqs []int64, now int64) (int64, error) {
	var res sql.Result
	var err error
	if len(seqs) == 0 {
		res, err = db.ExecContext(ctx, set, queue, now)
	} else {
		list, jerr := json.Marshal(seqs)
		if jerr != nil {
			return 0, fmt.Errorf("%s: %w", op, jerr)
		}
		res, err = db.ExecContext(ctx, set+` AND id IN (SELECT value FROM json_each(?3))`, queue, now, string(list))
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// PurgeBatch deletes up to SweepBatch messages of the queue in state and
// returns how many it deleted; the caller repeats it until it deletes fewer.
func PurgeBatch(ctx context.Context, db DBTX, queue, state string) (int64, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM mqlite_messages WHERE id IN (
		SELECT id FROM mqlite_messages WHERE queue = ?1 AND state = ?2 ORDER BY id LIMIT ?3)`, queue, state, SweepBatch)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// purgeSeqsSQL deletes the listed messages of a queue in a state, each
// found by its rowid.
const purgeSeqsSQL = `DELETE FROM mqlite_messages
	WHERE id IN (SELECT value FROM json_each(?3)) AND queue = ?1 AND state = ?2`

// PurgeSeqs deletes the messages of queue in state whose seq is one of
// seqs, and returns how many it deleted; the others are left as they are.
func PurgeSeqs(ctx context.Context, db DBTX, queue, state string, seqs []int64) (int64, error) {
	list, err := json.Marshal(seqs)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	res, err := db.ExecContext(ctx, purgeSeqsSQL, queue, state, string(list))
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// statsPart is one state's share of Stats: its count, body bytes and
// lowest sequence number, read from the state's partial index alone (the
// index holds body_len, and every index holds the rowid).
func statsPart(state, index, where string) string {
	return `SELECT '` + state + `' AS state, count(*) AS n, coalesce(sum(body_len), 0) AS bytes, min(id) AS first
	FROM mqlite_messages INDEXED BY ` + index + ` WHERE queue = ?1 AND ` + where
}

// statsSQL reads a queue's Stats from its partial indexes: for each state
// the count, the bytes and the oldest message (the lowest sequence number:
// sequence order is send order), whose enqueued_at is one rowid seek away.
// Held messages (active, behind their group) are the one set without an
// index of its own; they are counted through the queue's live grouped
// messages. It reads nothing outside the queue, and no body.
var statsSQL = `WITH per AS (
	` + statsPart("active", "mqlite_msg_active", `state = 'active' AND held = 0`) + `
	UNION ALL ` + statsPart("active", "mqlite_msg_group_live",
	liveGrouped+` AND state = 'active' AND held = 1`) + `
	UNION ALL ` + statsPart("locked", "mqlite_msg_locked", `state = 'locked'`) + `
	UNION ALL ` + statsPart("scheduled", "mqlite_msg_scheduled", `state = 'scheduled'`) + `
	UNION ALL ` + statsPart("deferred", "mqlite_msg_deferred", `state = 'deferred'`) + `
	UNION ALL ` + statsPart("dead_lettered", "mqlite_msg_dead", `state = 'dead_lettered'`) + `)
SELECT state, n, bytes, coalesce((SELECT enqueued_at FROM mqlite_messages WHERE id = per.first), 0),
	CASE state WHEN 'dead_lettered' THEN coalesce((SELECT min(dead_lettered_at) FROM mqlite_messages INDEXED BY mqlite_msg_dead
		WHERE queue = ?1 AND state = 'dead_lettered'), 0) ELSE 0 END
FROM per WHERE n > 0`

// Stats counts the queue's messages per state, with their body bytes and
// the oldest of each. Its cost follows the queue asked about, never the
// file: every figure comes from a range of the state's partial index for
// the queue (see statsSQL).
func Stats(ctx context.Context, db DBTX, queue string) (map[string]StateStats, error) {
	rows, err := db.QueryContext(ctx, statsSQL, queue)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	defer rows.Close()
	out := map[string]StateStats{}
	for rows.Next() {
		var state string
		var s StateStats
		if err := rows.Scan(&state, &s.Count, &s.Bytes, &s.OldestEnq, &s.OldestDead); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		if prev, ok := out[state]; ok { // active: the claimable and the held
			s.Count += prev.Count
			s.Bytes += prev.Bytes
			if s.OldestEnq == 0 || (prev.OldestEnq > 0 && prev.OldestEnq < s.OldestEnq) {
				s.OldestEnq = prev.OldestEnq
			}
		}
		out[state] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return out, nil
}

// oldestSQL reads the queue's two oldest moments with a few seeks: the
// enqueued_at of its lowest claimable message (the lowest of the first
// entries of each priority in mqlite_msg_active for the queue, then one
// rowid seek) and the
// dead_lettered_at of its lowest dead letter (the first entry of
// mqlite_msg_dead, which carries the column). Nothing else is read.
var oldestSQL = `SELECT
	coalesce((SELECT m.enqueued_at FROM mqlite_messages m WHERE m.id = (
		SELECT min(id) FROM (` + oldestActive() + `))), 0),
	coalesce((SELECT dead_lettered_at FROM mqlite_messages INDEXED BY mqlite_msg_dead
		 WHERE queue = ?1 AND state = 'dead_lettered' ORDER BY id LIMIT 1), 0)`

// oldestActive is the lowest id of each priority's claimable messages of
// the queue ?1, one seek of mqlite_msg_active (priority, then id) each.
func oldestActive() string {
	arms := make([]string, 0, driver.MaxPriority+1)
	for p := driver.MaxPriority; p >= 0; p-- {
		arms = append(arms, fmt.Sprintf(`SELECT * FROM (SELECT id FROM mqlite_messages INDEXED BY mqlite_msg_active
		 WHERE queue = ?1 AND priority = %d AND state = 'active' AND held = 0 ORDER BY id LIMIT 1)`, p))
	}
	return strings.Join(arms, "\n\tUNION ALL ")
}

// Oldest returns the enqueued_at of the queue's claimable message of lowest
// sequence number and the dead_lettered_at of its dead letter of lowest
// sequence number (0 for none), each from one index seek: its cost is the
// same on an empty queue as on a million-message one.
func Oldest(ctx context.Context, db DBTX, queue string) (activeEnq, deadAt int64, err error) {
	if err := db.QueryRowContext(ctx, oldestSQL, queue).Scan(&activeEnq, &deadAt); err != nil {
		return 0, 0, fmt.Errorf("oldest: %w", err)
	}
	return activeEnq, deadAt, nil
}
