package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// The broker's commit requests (POST /v1/commit) keep what a request with
// an idempotency key answered in mqlite_commits, keyed by the id of the
// access key that sent it and the idempotency key, as on SQLite (see
// internal/engine/commits.go): written in the transaction that commits
// the request, alive for driver.ReceiptTTLMS by the store's clock.

// LookupCommit returns the live record of key in scope; found is false
// when there is none. It runs in the commit's transaction, before anything
// is written.
func (PostgreSQL) LookupCommit(ctx context.Context, tx driver.DBTX, scope, key string) (rec driver.CommitRecord, found bool, err error) {
	now, err := nowOf(tx)
	if err != nil {
		return driver.CommitRecord{}, false, err
	}
	err = tx.QueryRowContext(ctx, `SELECT request, result FROM mqlite_commits
		WHERE scope = $1 AND idempotency_key = $2 AND expires_at > $3`, scope, key, now).Scan(&rec.Request, &rec.Result)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.CommitRecord{}, false, nil
	}
	if err != nil {
		return driver.CommitRecord{}, false, fmt.Errorf("look up commit %q: %w", key, err)
	}
	return rec, true, nil
}

// RecordCommit keeps rec under key in scope, in the commit's transaction,
// until the settlement receipts of the request expire. A record already
// there (expired, or written by a process that committed the same key a
// moment before: ON CONFLICT waits for it) is replaced, and takes a new
// id as SQLite's INSERT OR REPLACE gives it a new rowid, so that it counts
// as the newest for TrimCommits.
func (PostgreSQL) RecordCommit(ctx context.Context, tx driver.DBTX, scope, key string, rec driver.CommitRecord) error {
	now, err := nowOf(tx)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO mqlite_commits
		(scope, idempotency_key, request, result, expires_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope, idempotency_key) DO UPDATE SET id = DEFAULT, request = EXCLUDED.request,
		result = EXCLUDED.result, expires_at = EXCLUDED.expires_at`,
		scope, key, rec.Request, nonNil(rec.Result), now+driver.ReceiptTTLMS); err != nil {
		return fmt.Errorf("record commit %q: %w", key, err)
	}
	return nil
}

// TrimCommits keeps the keep newest commit records of scope and deletes
// the others (the oldest first), in the commit's transaction; it returns
// how many records scope holds after. Expired records are gone as well:
// a lookup never sees them, the count should not either. Two processes
// trimming one scope at once delete the same rows; the second finds them
// gone and deletes nothing more.
func (PostgreSQL) TrimCommits(ctx context.Context, tx driver.DBTX, scope string, keep int) (int, error) {
	now, err := nowOf(tx)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM mqlite_commits WHERE scope = $1 AND (expires_at <= $3
		OR id IN (SELECT id FROM mqlite_commits WHERE scope = $1 ORDER BY id DESC OFFSET $2))`,
		scope, keep, now); err != nil {
		return 0, fmt.Errorf("trim commit records: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_commits WHERE scope = $1`, scope).Scan(&n); err != nil {
		return 0, fmt.Errorf("count commit records: %w", err)
	}
	return n, nil
}

// LookupDedup reads, on db (the caller's transaction), the live dedup row
// of the MessageID messageID in queue (kind 'id'), whether its message is
// unfinished, the queue's dedup window and the store's now. An unknown
// queue is errs.ErrQueueNotFound.
func (PostgreSQL) LookupDedup(ctx context.Context, db driver.DBTX, queue, messageID string) (driver.DedupEntry, error) {
	now, err := nowOf(db)
	if err != nil {
		return driver.DedupEntry{}, err
	}
	e := driver.DedupEntry{NowMS: now}
	var seq sql.NullInt64
	var unfinished sql.NullBool
	var props sql.NullString
	// Unfinished: the live states, neither dead-lettered nor completed.
	err = db.QueryRowContext(ctx, `SELECT q.dedup_window_ms, d.seq,
		m.state IN ('active', 'locked', 'deferred', 'scheduled'),
		CASE WHEN m.state IN ('active', 'locked', 'deferred', 'scheduled') THEN m.properties END
		FROM mqlite_queues q
		LEFT JOIN mqlite_dedup d ON d.queue = q.name AND d.kind = 'id' AND d.key = $2 AND d.expires_at > $3
		LEFT JOIN mqlite_messages m ON m.id = d.seq AND m.queue = q.name
		WHERE q.name = $1`, queue, messageID, now).Scan(&e.WindowMS, &seq, &unfinished, &props)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return e, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, queue)
	case err != nil:
		return e, fmt.Errorf("lookup dedup: %w", err)
	}
	e.Found, e.Seq, e.Unfinished = seq.Valid, seq.Int64, unfinished.Valid && unfinished.Bool
	e.Properties = props.String
	return e, nil
}

// ForgetDedup deletes, on db, the dedup row of messageID in queue when it
// still points at seq, so that the next send of messageID is a new
// message. A row another process replaced meanwhile (another seq) stays.
func (PostgreSQL) ForgetDedup(ctx context.Context, db driver.DBTX, queue, messageID string, seq int64) error {
	if _, err := db.ExecContext(ctx, `DELETE FROM mqlite_dedup WHERE queue = $1 AND kind = 'id' AND key = $2 AND seq = $3`,
		queue, messageID, seq); err != nil {
		return fmt.Errorf("forget dedup: %w", err)
	}
	return nil
}
