// Package schema owns mqlite's on-disk layout: the embedded goose migrations,
// the guard token that names the layout, and Apply, which brings a file up to
// date or refuses it.
//
// The complete DDL is pinned by testdata/schema.golden.sql. A file carrying a
// guard token other than [Token] was written by an incompatible mqlite and is
// refused with mqlite.ErrSchemaVersionMismatch before anything is written.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/mqlite/mqlite/internal/errs"
)

// Token names the table layout this binary reads and writes. An incompatible
// change to the layout must change it.
const Token = "mqlite-schema-2"

// VersionTable is the table in which goose records applied migrations.
const VersionTable = "mqlite_migrations"

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the embedded migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embed pattern above guarantees the folder exists
	}
	return sub
}

// GuardToken reads the guard token of the file behind db. It returns "" and
// no error when the file has no guard table yet (a new or foreign file).
func GuardToken(ctx context.Context, db *sql.DB) (string, error) {
	var n int
	err := db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'mqlite_guard'`).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("look for guard: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	var token string
	err = db.QueryRowContext(ctx, `SELECT token FROM mqlite_guard WHERE id = 1`).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: guard table without a token", errs.ErrSchemaVersionMismatch)
	}
	if err != nil {
		return "", fmt.Errorf("read guard: %w", err)
	}
	return token, nil
}

// Check returns ErrSchemaVersionMismatch when the file carries a guard token
// other than Token. It only reads.
func Check(ctx context.Context, db *sql.DB) (fresh bool, err error) {
	token, err := GuardToken(ctx, db)
	if err != nil {
		return false, err
	}
	if token == "" {
		return true, nil
	}
	if token != Token {
		return false, fmt.Errorf("%w: file has %q, this binary needs %q",
			errs.ErrSchemaVersionMismatch, token, Token)
	}
	return false, nil
}

// Apply runs every pending migration on db. Call Check first: Apply assumes
// the file is either new or carries Token.
func Apply(ctx context.Context, db *sql.DB) error {
	store, err := database.NewStore(database.DialectSQLite3, VersionTable)
	if err != nil {
		return fmt.Errorf("migration store: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, Migrations(),
		goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}
