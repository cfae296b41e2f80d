package engine

import (
	"context"
	"database/sql"
	"errors"
)

// CreateKey inserts the access key k.
func (SQLite) CreateKey(ctx context.Context, db DBTX, k AccessKey) error {
	_, err := db.ExecContext(ctx,
		`INSERT INTO mqlite_access_keys (id, secret_hash, scopes, created_at) VALUES (?, ?, ?, ?)`,
		k.ID, k.SecretHash, k.Scopes, k.CreatedAt)
	return err
}

// ListKeys reads every access key, oldest first, without their hashes.
func (SQLite) ListKeys(ctx context.Context, db DBTX) ([]AccessKey, error) {
	rows, err := db.QueryContext(ctx,
		`SELECT id, scopes, created_at, revoked_at FROM mqlite_access_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AccessKey
	for rows.Next() {
		var k AccessKey
		if err := rows.Scan(&k.ID, &k.Scopes, &k.CreatedAt, &k.RevokedAt); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes the access key id at now unless it is revoked already.
func (SQLite) RevokeKey(ctx context.Context, db DBTX, id string, now int64) (bool, error) {
	res, err := db.ExecContext(ctx,
		`UPDATE mqlite_access_keys SET revoked_at = CASE WHEN revoked_at = 0 THEN ? ELSE revoked_at END WHERE id = ?`,
		now, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// GetKey reads the access key id.
func (SQLite) GetKey(ctx context.Context, db DBTX, id string) (AccessKey, bool, error) {
	k := AccessKey{ID: id}
	err := db.QueryRowContext(ctx,
		`SELECT secret_hash, scopes, created_at, revoked_at FROM mqlite_access_keys WHERE id = ?`, id).
		Scan(&k.SecretHash, &k.Scopes, &k.CreatedAt, &k.RevokedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return AccessKey{}, false, nil
	}
	return k, err == nil, err
}
