package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/mqlite/mqlite/internal/driver"
)

// The reads of a queue's messages: Peek, PeekDeadLetters and Find read a
// page in sequence order, Stats, Oldest and Busy count. Each is one
// statement (Find two, the second a page of the first's ids), so each sees
// one snapshot of the database whatever other processes write meanwhile,
// and none writes or takes a lock: a read never waits behind a claim or a
// sweep, nor holds one up. No read shows a completed message (the receipt
// a completion leaves until CompactReceipts turns it).

// liveStates are the states of a message that still counts in its group:
// all but dead_lettered and completed (live, as a list).
const liveStates = `('active', 'locked', 'deferred', 'scheduled')`

// stateIDs is one state's ids of the queue $1 from id $2 on, in id order,
// at most $3: a range of the state's partial index (cond names it),
// ordered by order (id, or an expression of it).
func stateIDs(cond, order string) string {
	return `(SELECT id FROM mqlite_messages WHERE queue = $1 AND ` + cond + ` AND id >= $2 ORDER BY ` + order + ` LIMIT $3)`
}

// activeIDs is the queue's active ids: one range of mqlite_msg_active
// (queue, priority, id) per priority, each in id order, so that the
// window merges ten short ranges where one range in priority order would
// be read whole and sorted.
func activeIDs() []string {
	arms := make([]string, 0, driver.MaxPriority+1)
	for p := driver.MaxPriority; p >= 0; p-- {
		arms = append(arms, stateIDs(fmt.Sprintf(`state = 'active' AND priority = %d`, p), "id"))
	}
	return arms
}

// The ids of a queue per state (stateIDs). The locked index is in lease
// order: its arm reads the queue's locked entries and sorts them, by id
// + 0 so that no plan walks the primary key instead, through every
// queue's rows from $2 on.
var (
	lockedIDs    = stateIDs(`state = 'locked'`, "id + 0")
	scheduledIDs = stateIDs(`state = 'scheduled'`, "id")
	deferredIDs  = stateIDs(`state = 'deferred'`, "id")
	deadIDs      = stateIDs(`state = 'dead_lettered'`, "id")
	windowArms   = driver.Arms{Active: activeIDs(), Locked: []string{lockedIDs}, Scheduled: []string{scheduledIDs},
		Deferred: []string{deferredIDs}, Dead: []string{deadIDs}}
)

// windowSQL lists the ids of the queue $1 in state from id $2 on, in id
// order, at most $3 of them: the states' ranges merged (UNION ALL: a
// message is in one state) and cut by the LIMIT, so that nothing of
// another queue is read. state is one state, or "" for every live one
// (all but dead_lettered and completed).
func windowSQL(state string) (string, error) {
	arms, err := windowArms.For(state)
	if err != nil {
		return "", err
	}
	return `SELECT id FROM (` + strings.Join(arms, "\n\tUNION ALL ") + `) w ORDER BY id LIMIT $3`, nil
}

// Peek reads up to r.Max messages of the queue from r.FromSeq on, in any
// state but dead_lettered (and completed), without locking them.
func (PostgreSQL) Peek(ctx context.Context, db driver.DBTX, r driver.PeekRequest) ([]driver.Row, error) {
	return peek(ctx, db, r, "")
}

// PeekDeadLetters reads up to r.Max dead letters of the queue from
// r.FromSeq on.
func (PostgreSQL) PeekDeadLetters(ctx context.Context, db driver.DBTX, r driver.PeekRequest) ([]driver.Row, error) {
	return peek(ctx, db, r, "dead_lettered")
}

// peek reads the rows of a window (windowSQL) of the queue in state, in
// one statement, and stops reading bodies once the page passes r.MaxBytes
// (the first row comes whatever its size).
func peek(ctx context.Context, db driver.DBTX, r driver.PeekRequest, state string) ([]driver.Row, error) {
	window, err := windowSQL(state)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT `+rowColumns+` FROM mqlite_messages
		WHERE id IN (`+window+`) ORDER BY id`, r.Queue, r.FromSeq, r.Max)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	out, _, err := driver.PageRows(rows, r.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return out, nil
}

// findRowsSQL reads the rows of the window's ids ($1) that are still in
// the window's states ($2: one state, or the empty string for the live
// ones) and pass the filters ($3 subject prefix, $4 MessageID, $5 and $6 a
// property's key and value; the empty string for none), at most $7, in id
// order. Properties are a JSON object of strings.
const findRowsSQL = `SELECT ` + rowColumns + ` FROM mqlite_messages
	WHERE id = ANY($1)
	  AND (state = $2 OR ($2 = '' AND state IN ` + liveStates + `))
	  AND ($3 = '' OR starts_with(coalesce(subject, ''), $3))
	  AND ($4 = '' OR message_id = $4)
	  AND ($5 = '' OR (nullif(properties, '')::jsonb ->> $5) = $6)
	ORDER BY id LIMIT $7`

// Find reads a page of r: first the window of at most r.ScanMax messages
// of the queue in r.State from r.FromSeq (ids only, from the indexes),
// then the rows of the window that pass the other filters, at most r.Max
// within r.MaxBytes. A message that left the window's states between the
// two statements is not shown.
func (PostgreSQL) Find(ctx context.Context, db driver.DBTX, r driver.FindRequest) (driver.FindResult, error) {
	window, err := windowSQL(r.State)
	if err != nil {
		return driver.FindResult{}, err
	}
	ids, err := driver.QueryIDs(ctx, db, window, r.Queue, r.FromSeq, r.ScanMax)
	if err != nil {
		return driver.FindResult{}, fmt.Errorf("find: %w", err)
	}
	if len(ids) == 0 {
		return driver.FindResult{}, nil
	}
	rows, err := db.QueryContext(ctx, findRowsSQL, ids, r.State, r.SubjectPrefix, r.MessageID,
		r.PropertyKey, r.PropertyValue, r.Max)
	if err != nil {
		return driver.FindResult{}, fmt.Errorf("find: %w", err)
	}
	out, err := driver.FindPage(ids, rows, r)
	if err != nil {
		return driver.FindResult{}, fmt.Errorf("find: %w", err)
	}
	return out, nil
}

// statsPart is one state's share of Stats: its count, body bytes, lowest
// id and earliest dead-letter moment, from the state's partial index for
// the queue $1 (each carries body_len; the dead letters' also
// dead_lettered_at).
func statsPart(state string) string {
	return `SELECT '` + state + `' AS state, count(*) AS n, coalesce(sum(body_len), 0)::bigint AS bytes,
		min(id) AS first, coalesce(min(dead_lettered_at), 0) AS dead
	FROM mqlite_messages WHERE queue = $1 AND state = '` + state + `'`
}

// statsSQL reads a queue's Stats in one snapshot: per state the count,
// the bytes and the oldest message (the lowest id: id order is send
// order), whose enqueued_at is one primary-key probe away. Completed
// messages are not counted.
var statsSQL = `WITH per AS (
	` + statsPart("active") + `
	UNION ALL ` + statsPart("locked") + `
	UNION ALL ` + statsPart("scheduled") + `
	UNION ALL ` + statsPart("deferred") + `
	UNION ALL ` + statsPart("dead_lettered") + `)
SELECT state, n, bytes, coalesce((SELECT enqueued_at FROM mqlite_messages WHERE id = per.first), 0),
	CASE state WHEN 'dead_lettered' THEN dead ELSE 0 END
FROM per WHERE n > 0`

// Stats counts the queue's messages per state, with their body bytes and
// the oldest of each; a state with no message has no entry.
func (PostgreSQL) Stats(ctx context.Context, db driver.DBTX, queue string) (map[string]driver.StateStats, error) {
	rows, err := db.QueryContext(ctx, statsSQL, queue)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	defer rows.Close()
	out := map[string]driver.StateStats{}
	for rows.Next() {
		var state string
		var s driver.StateStats
		if err := rows.Scan(&state, &s.Count, &s.Bytes, &s.OldestEnq, &s.OldestDead); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		out[state] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return out, nil
}

// oldestSQL reads the queue's two oldest moments: the enqueued_at of its
// claimable message of lowest id (the first free entry of each priority's
// range of mqlite_msg_active, the lowest of them) and the dead_lettered_at
// of its dead letter of lowest id (the first entry of mqlite_msg_dead).
var oldestSQL = `SELECT
	coalesce((SELECT enqueued_at FROM mqlite_messages WHERE id = (SELECT min(id) FROM (` + oldestActive() + `) a)), 0),
	coalesce((SELECT dead_lettered_at FROM mqlite_messages
		 WHERE queue = $1 AND state = 'dead_lettered' ORDER BY id LIMIT 1), 0)`

// oldestActive is the lowest id of each priority's claimable messages of
// the queue $1: active and free in their group (groupFree).
func oldestActive() string {
	arms := make([]string, 0, driver.MaxPriority+1)
	for p := driver.MaxPriority; p >= 0; p-- {
		arms = append(arms, fmt.Sprintf(`(SELECT m.id FROM mqlite_messages m
		 WHERE m.queue = $1 AND m.state = 'active' AND m.priority = %d AND %s ORDER BY m.id LIMIT 1)`, p, groupFree))
	}
	return strings.Join(arms, "\n\tUNION ALL ")
}

// Oldest returns the enqueued_at of the queue's claimable message of
// lowest sequence number and the dead_lettered_at of its dead letter of
// lowest sequence number (0 for none).
func (PostgreSQL) Oldest(ctx context.Context, db driver.DBTX, queue string) (activeEnq, deadAt int64, err error) {
	if err := db.QueryRowContext(ctx, oldestSQL, queue).Scan(&activeEnq, &deadAt); err != nil {
		return 0, 0, fmt.Errorf("oldest: %w", err)
	}
	return activeEnq, deadAt, nil
}

// Busy counts, in one statement (one snapshot), the messages of queues
// that a consumer could take or holds now: active and free in their group
// (groupFree), locked, or scheduled and due by the store's clock.
func (PostgreSQL) Busy(ctx context.Context, db driver.DBTX, queues []string) (int64, error) {
	now, err := nowOf(db)
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_messages m
		WHERE m.queue = ANY($1)
		  AND (m.state = 'active' AND `+groupFree+` OR m.state = 'locked' OR m.state = 'scheduled' AND m.visible_at <= $2)`,
		queues, now).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("busy: %w", err)
	}
	return n, nil
}
