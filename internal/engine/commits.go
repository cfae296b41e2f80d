package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
)

// The broker's commit requests (POST /v1/commit) keep what a request with
// an idempotency key answered in mqlite_commits, keyed by the id of
// the access key that sent it and the idempotency key. The
// row is written in the transaction that commits the request, so it exists
// exactly when the request committed, and it lasts as long as the
// settlement receipts (ReceiptTTLMS): a lookup ignores it after, swept or
// not, and the janitor removes it. TrimCommits bounds the records of one
// scope.

// CommitRecord is driver.CommitRecord.
type CommitRecord = driver.CommitRecord

// LookupCommit returns the live record of key in scope; found is false
// when there is none. It runs in the commit's transaction, before anything
// is written.
func LookupCommit(ctx context.Context, tx DBTX, scope, key string) (rec CommitRecord, found bool, err error) {
	err = tx.QueryRowContext(ctx, `SELECT request, result FROM mqlite_commits
		WHERE scope = ? AND idempotency_key = ? AND expires_at > mqlite_now()`, scope, key).Scan(&rec.Request, &rec.Result)
	if errors.Is(err, sql.ErrNoRows) {
		return CommitRecord{}, false, nil
	}
	if err != nil {
		return CommitRecord{}, false, fmt.Errorf("look up commit %q: %w", key, err)
	}
	return rec, true, nil
}

// RecordCommit keeps req's answer under key in scope, in the commit's
// transaction, until the settlement receipts of the request expire. A
// record left from before, already expired, is replaced.
func RecordCommit(ctx context.Context, tx DBTX, scope, key string, rec CommitRecord) error {
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO mqlite_commits
		(scope, idempotency_key, request, result, expires_at) VALUES (?, ?, ?, ?, mqlite_now() + ?)`,
		scope, key, rec.Request, rec.Result, ReceiptTTLMS); err != nil {
		return fmt.Errorf("record commit %q: %w", key, err)
	}
	return nil
}

// TrimCommits keeps the keep newest commit records of scope and deletes
// the others (the oldest first), in the commit's transaction; it returns
// how many records scope holds after. Expired records are gone as well:
// a lookup never sees them, the count should not either.
func TrimCommits(ctx context.Context, tx DBTX, scope string, keep int) (int, error) {
	if _, err := tx.ExecContext(ctx, `DELETE FROM mqlite_commits WHERE scope = ?1 AND (expires_at <= mqlite_now()
		OR id IN (SELECT id FROM mqlite_commits WHERE scope = ?1 ORDER BY id DESC LIMIT -1 OFFSET ?2))`,
		scope, keep); err != nil {
		return 0, fmt.Errorf("trim commit records: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM mqlite_commits WHERE scope = ?`, scope).Scan(&n); err != nil {
		return 0, fmt.Errorf("count commit records: %w", err)
	}
	return n, nil
}
