package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
)

// LookupDedup reads, on db (the caller's transaction), the live dedup row of
// messageID in queue, whether its message is unfinished, the queue's dedup
// window and the store's now. An unknown queue is errs.ErrQueueNotFound.
func LookupDedup(ctx context.Context, db DBTX, queue, messageID string) (DedupEntry, error) {
	var e DedupEntry
	var seq sql.NullInt64
	var unfinished sql.NullBool
	var props sql.NullString
	err := db.QueryRowContext(ctx, `SELECT q.dedup_window_ms, mqlite_now(), d.seq,
		(SELECT m.`+live+` FROM mqlite_messages m WHERE m.id = d.seq AND m.queue = ?1),
		(SELECT m.properties FROM mqlite_messages m WHERE m.id = d.seq AND m.queue = ?1 AND m.`+live+`)
		FROM mqlite_queues q
		LEFT JOIN mqlite_dedup d ON d.queue = ?1 AND d.key = ?2 AND d.expires_at > mqlite_now()
		WHERE q.name = ?1`, queue, messageID).Scan(&e.WindowMS, &e.NowMS, &seq, &unfinished, &props)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return e, noQueueError{queue}
	case err != nil:
		return e, interpret("lookup dedup", err)
	}
	e.Found, e.Seq, e.Unfinished = seq.Valid, seq.Int64, unfinished.Valid && unfinished.Bool
	e.Properties = props.String
	return e, nil
}

// ForgetDedup deletes, on db, the dedup row of messageID in queue when it
// still points at seq, so that the next send of messageID is a new message.
func ForgetDedup(ctx context.Context, db DBTX, queue, messageID string, seq int64) error {
	_, err := db.ExecContext(ctx, `DELETE FROM mqlite_dedup WHERE queue = ?1 AND key = ?2 AND seq = ?3`,
		queue, messageID, seq)
	return interpret("forget dedup", err)
}

// Now reads the store's now (its Clock), in epoch milliseconds, on db.
func Now(ctx context.Context, db DBTX) (int64, error) {
	var now int64
	err := db.QueryRowContext(ctx, `SELECT mqlite_now()`).Scan(&now)
	return now, interpret("now", err)
}

// Busy counts, on db in one statement (one snapshot), the messages of
// queues that a consumer could take or holds now: active and not held by
// their group, locked, or scheduled and due by the store's clock.
func Busy(ctx context.Context, db DBTX, queues []string) (int64, error) {
	names, err := json.Marshal(queues)
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_messages
		WHERE queue IN (SELECT value FROM json_each(?1))
		AND (state = 'active' AND held = 0 OR state = 'locked' OR state = 'scheduled' AND visible_at <= mqlite_now())`,
		string(names)).Scan(&n)
	return n, interpret("busy", err)
}
