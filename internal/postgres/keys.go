package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/mqlite/mqlite/internal/driver"
)

// CreateKey inserts the access key k.
func (PostgreSQL) CreateKey(ctx context.Context, db driver.DBTX, k driver.AccessKey) error {
	_, err := db.ExecContext(ctx,
		`INSERT INTO mqlite_access_keys (id, secret_hash, scopes, created_at) VALUES ($1, $2, $3, $4)`,
		k.ID, k.SecretHash, k.Scopes, k.CreatedAt)
	return err
}

// ListKeys reads every access key, oldest first, without their hashes.
func (PostgreSQL) ListKeys(ctx context.Context, db driver.DBTX) ([]driver.AccessKey, error) {
	rows, err := db.QueryContext(ctx,
		`SELECT id, scopes, created_at, revoked_at FROM mqlite_access_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.AccessKey
	for rows.Next() {
		var k driver.AccessKey
		if err := rows.Scan(&k.ID, &k.Scopes, &k.CreatedAt, &k.RevokedAt); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes the access key id at now unless it is revoked already.
func (PostgreSQL) RevokeKey(ctx context.Context, db driver.DBTX, id string, now int64) (bool, error) {
	res, err := db.ExecContext(ctx,
		`UPDATE mqlite_access_keys SET revoked_at = CASE WHEN revoked_at = 0 THEN $1 ELSE revoked_at END WHERE id = $2`,
		now, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// GetKey reads the access key id.
func (PostgreSQL) GetKey(ctx context.Context, db driver.DBTX, id string) (driver.AccessKey, bool, error) {
	k := driver.AccessKey{ID: id}
	err := db.QueryRowContext(ctx,
		`SELECT secret_hash, scopes, created_at, revoked_at FROM mqlite_access_keys WHERE id = $1`, id).
		Scan(&k.SecretHash, &k.Scopes, &k.CreatedAt, &k.RevokedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.AccessKey{}, false, nil
	}
	return k, err == nil, err
}
