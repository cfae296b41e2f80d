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
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/mqlite/mqlite/internal/errs"
)

// Token names the table layout this binary reads and writes. An incompatible
// change to the layout must change it.
const Token = "mqlite-schema-3"

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
// other than Token, or carries none (it is not an mqlite store) but holds a
// table, index or trigger of one of the names the migrations create: mqlite
// would fail half-way through or, worse, use a foreign table. It only reads,
// so a refused file is left byte-identical. fresh reports a file with no
// guard: new, or the application's own database, which mqlite may share.
func Check(ctx context.Context, db *sql.DB) (fresh bool, err error) {
	token, err := GuardToken(ctx, db)
	if err != nil {
		return false, err
	}
	if token == "" {
		return true, checkNoClash(ctx, db)
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

// createdName finds the name of each object a migration creates.
var createdName = regexp.MustCompile(`(?m)^CREATE (?:TABLE|INDEX|TRIGGER) (\w+)`)

// checkNoClash refuses a file without a guard that already holds an object
// of a name the migrations create.
func checkNoClash(ctx context.Context, db *sql.DB) error {
	names := []any{VersionTable}
	err := fs.WalkDir(Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text, err := fs.ReadFile(Migrations(), path)
		for _, m := range createdName.FindAllSubmatch(text, -1) {
			names = append(names, string(m[1]))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("read migrations: %w", err)
	}
	var clash string
	err = db.QueryRowContext(ctx, `SELECT name FROM sqlite_schema WHERE name IN (SELECT value FROM json_each(?)) LIMIT 1`,
		jsonList(names)).Scan(&clash)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look for clashing tables: %w", err)
	}
	return fmt.Errorf("%w: the file is not an mqlite store but already has an object named %q",
		errs.ErrSchemaVersionMismatch, clash)
}

func jsonList(v []any) string {
	b, _ := json.Marshal(v) // strings only
	return string(b)
}
