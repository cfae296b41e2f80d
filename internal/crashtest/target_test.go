//go:build crash_injection

package crashtest_test

import (
	"database/sql"
	"strconv"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to look at a PostgreSQL store
)

// A crash test's store is a SQLite file or a PostgreSQL database: the
// target the harness hands its workers (envWorker) is the file's path or
// the database's URL. The few statements of the tests' own tables are
// written once, with ? placeholders, and bound to the target's dialect.

// onPostgres reports whether target is a PostgreSQL URL.
func onPostgres(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// bind returns q for target: on PostgreSQL each ? becomes $1, $2, … (no
// statement of these tests has a ? in a literal).
func bind(target, q string) string {
	if !onPostgres(target) {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// rawOpen opens a plain handle on target, beside any store: to look at
// what a killed worker left before a store opens it again.
func rawOpen(target string) (*sql.DB, error) {
	if onPostgres(target) {
		return sql.Open("pgx", target)
	}
	return sql.Open("sqlite", target)
}

// effectsDDLOf is the effects table of target's dialect.
func effectsDDLOf(target string) string {
	if onPostgres(target) {
		return `CREATE TABLE IF NOT EXISTS effects (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, seq bigint NOT NULL, delivery integer NOT NULL)`
	}
	return effectsDDL
}

// ordersDDLOf is the orders table of target's dialect.
func ordersDDLOf(target string) string {
	if onPostgres(target) {
		return `CREATE TABLE IF NOT EXISTS orders (
		nonce text PRIMARY KEY, seq bigint NOT NULL UNIQUE, body_hash bytea NOT NULL,
		handled integer NOT NULL DEFAULT 0)`
	}
	return `CREATE TABLE IF NOT EXISTS orders (
		nonce TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, body_hash BLOB NOT NULL,
		handled INTEGER NOT NULL DEFAULT 0) STRICT`
}

// onwardSeqOf is the SQL expression of the input seq an onward message's
// body names, in target's dialect.
func onwardSeqOf(target string) string {
	from := strconv.Itoa(len(onwardPrefix) + 1)
	if onPostgres(target) {
		return `CAST(substr(convert_from(body, 'UTF8'), ` + from + `) AS bigint)`
	}
	return `CAST(substr(CAST(body AS TEXT), ` + from + `) AS INTEGER)`
}
