package mqlite

import (
	"cmp"
	"context"
	"database/sql"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/postgres"
	"github.com/mqlite/mqlite/schema"
)

// The engines, the one file of the package that names them (the seam test
// pins it): SQLite on a file, PostgreSQL on a database. Every statement of
// the package goes through a Store's eng, which is one of these; Open picks
// it by the path it is given, never by the caller's code.
var (
	sqlite     driver.Driver = engine.SQLite{}
	postgresql driver.Driver = postgres.PostgreSQL{}
)

// init registers the engines, so that the packages acting on a caller's
// bare transaction (outbox, consumer, broker, jobs) find its Executor
// through driver.Of.
func init() {
	driver.Register(sqlite)
	driver.Register(postgresql)
}

// layout is what Open does with an engine's mqlite objects: tell what the
// database holds, which migration it has, and bring it up to date.
type layout struct {
	check   func(context.Context, *sql.DB) (schema.State, error)
	version func(context.Context, *sql.DB) (int64, error)
	apply   func(context.Context, *sql.DB) error
	latest  int64
	token   string // the guard token of the layout, for errors
	// readOnly reports whether the database's sessions cannot write; nil:
	// they can.
	readOnly func(context.Context, *sql.DB) (bool, error)
}

var (
	sqliteLayout   = layout{schema.Check, schema.Version, schema.Apply, schema.Latest, schema.Token, nil}
	postgresLayout = layout{schema.CheckPostgres, schema.PostgresVersion, schema.ApplyPostgres, schema.PostgresLatest, schema.PostgresToken,
		schema.PostgresReadOnly}
)

// poolSize is how many connections a store on a shared engine keeps
// (Config.MaxConns, or the PostgreSQL engine's default).
func poolSize(opts Config) int { return cmp.Or(opts.MaxConns, postgres.DefaultMaxConns) }

// IsPostgresURL reports whether path names a PostgreSQL database (a URL
// of scheme postgres or postgresql), which Open opens on the PostgreSQL
// engine; anything else is a SQLite file.
func IsPostgresURL(path string) bool {
	scheme, _, ok := strings.Cut(path, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

// openPostgresURL opens a plain handle on the PostgreSQL database at url,
// of no store (no callbacks, no listener): the target of Copy.
func openPostgresURL(url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, invalidf(ErrInvalidArgument, "the PostgreSQL URL %s: %v", redactURL(url), err)
	}
	return stdlib.OpenDB(*cfg), nil
}

// redactURL is a PostgreSQL URL without its password, for Path and logs.
func redactURL(path string) string {
	u, err := url.Parse(path)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
