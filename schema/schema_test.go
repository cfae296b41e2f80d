package schema_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/schema"
)

var update = flag.Bool("update", false, "rewrite testdata/schema.golden.sql from a fresh store")

const goldenPath = "testdata/schema.golden.sql"

const goldenHeader = `-- The whole DDL of a fresh mqlite file, as sqlite_schema holds it after Open.
-- Generated: go test ./schema -update. Do not edit by hand.
`

// dumpSchema returns every object of the file with its SQL, one statement
// per entry, separated by blank lines.
func dumpSchema(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var entries []string
	for rows.Next() {
		var typ, name, stmt string
		if err := rows.Scan(&typ, &name, &stmt); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, "-- "+typ+" "+name+"\n"+stmt+";\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return goldenHeader + "\n" + strings.Join(entries, "\n")
}

// plainDB opens a fresh file with database/sql alone, no mqlite store.
func plainDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestGoldenDDL(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	got := dumpSchema(t, b.Store.DB())
	if *update {
		if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenPath)
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run go test ./schema -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("the schema differs from %s; if the change is intended, run go test ./schema -update and "+
			"change schema.Token when old files cannot be read.\n--- got ---\n%s", goldenPath, got)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	apply := func(t *testing.T, db *sql.DB) {
		if err := schema.Apply(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(query string) func(t *testing.T, db *sql.DB) {
		return func(t *testing.T, db *sql.DB) {
			if _, err := db.Exec(query); err != nil {
				t.Fatal(err)
			}
		}
	}
	then := func(fs ...func(t *testing.T, db *sql.DB)) func(t *testing.T, db *sql.DB) {
		return func(t *testing.T, db *sql.DB) {
			for _, f := range fs {
				f(t, db)
			}
		}
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, db *sql.DB)
		want    schema.State
		wantErr error
	}{
		{"new file", func(*testing.T, *sql.DB) {}, schema.Fresh, nil},
		{"the application's own tables of the unprefixed names",
			exec(`CREATE TABLE messages (id INTEGER PRIMARY KEY); CREATE TABLE queues (x); CREATE INDEX idx_msg_active ON messages (id)`),
			schema.Fresh, nil},
		{"goose's table alone: a creation cut short",
			exec(`CREATE TABLE mqlite_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, version_id INTEGER NOT NULL, is_applied INTEGER NOT NULL, tstamp TIMESTAMP)`),
			schema.Fresh, nil},
		{"a foreign mqlite_ table", exec(`CREATE TABLE mqlite_messages (id INTEGER PRIMARY KEY)`), 0, mqlite.ErrSchemaVersionMismatch},
		{"a foreign MQLITE_ view", exec(`CREATE VIEW MQLITE_VIEW AS SELECT 1`), 0, mqlite.ErrSchemaVersionMismatch},
		{"current token", apply, schema.Current, nil},
		{"migrations left to record", then(apply, exec(fmt.Sprintf(`DELETE FROM mqlite_migrations WHERE version_id = %d`, schema.Latest))), schema.Outdated, nil},
		{"unprefixed layout", then(apply, exec(`UPDATE mqlite_guard SET token = 'mqlite-schema-3'`)), 0, mqlite.ErrSchemaVersionMismatch},
		{"other token", then(apply, exec(`UPDATE mqlite_guard SET token = 'mqlite-schema-0'`)), 0, mqlite.ErrSchemaVersionMismatch},
		{"guard table without a token", then(apply, exec(`DELETE FROM mqlite_guard`)), 0, mqlite.ErrSchemaVersionMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := plainDB(t)
			tc.prepare(t, db)
			before := dumpSchema(t, db)
			state, err := schema.Check(ctx, db)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Check: %v", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Check: %v, want %v", err, tc.wantErr)
			}
			if err == nil && state != tc.want {
				t.Fatalf("state = %v, want %v", state, tc.want)
			}
			if after := dumpSchema(t, db); after != before {
				t.Fatal("Check changed the schema")
			}
		})
	}
}

func TestApplyTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := plainDB(t)
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO mqlite_queues VALUES ('q', 'standard', 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var versions, queues int
		var token string
		err := db.QueryRow(`SELECT (SELECT count(*) FROM `+schema.VersionTable+`),
			(SELECT count(*) FROM mqlite_queues), (SELECT token FROM mqlite_guard)`).Scan(&versions, &queues, &token)
		if err != nil {
			t.Fatal(err)
		}
		return dumpSchema(t, db) + strings.Repeat("v", versions) + strings.Repeat("q", queues) + token
	}
	before := state()
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if after := state(); after != before {
		t.Fatalf("second Apply changed the file:\nbefore %s\nafter  %s", before, after)
	}
	if !strings.HasSuffix(before, schema.Token) {
		t.Fatalf("guard token is not %s", schema.Token)
	}
}

// TestSQLIsTheLayout: the script `mqlite schema` prints makes, run by hand
// on an empty file, exactly the objects of a fresh store, all named
// mqlite_… but sqlite_sequence, and a store opens on it as up to date.
func TestSQLIsTheLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "by-hand.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA page_size = 1024; PRAGMA journal_mode = WAL`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(schema.SQL()); err != nil {
		t.Fatalf("run schema.SQL(): %v", err)
	}
	got := dumpSchema(t, db)
	fresh := testdb.Open(t, mqlite.Config{})
	if want := dumpSchema(t, fresh.Store.DB()); got != want {
		t.Fatalf("schema.SQL() makes another layout than Open:\n--- SQL ---\n%s\n--- Open ---\n%s", got, want)
	}
	for _, name := range testdb.Strings(t, db, `SELECT name FROM sqlite_schema WHERE name NOT LIKE 'mqlite\_%' ESCAPE '\' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`) {
		t.Errorf("object %q is not named mqlite_…", name)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := mqlite.Open(ctx, path, mqlite.Config{ExistingOnly: true})
	if err != nil {
		t.Fatalf("open the store made by hand: %v", err)
	}
	defer st.Close()
	if m := st.Migration(); m.From != schema.Latest || m.To != schema.Latest {
		t.Fatalf("Migration() = %+v, want up to date at %d", m, schema.Latest)
	}
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOperationsListsEveryObject: docs/operations.md lists exactly the
// objects a fresh store adds to a file (sqlite_ names aside).
func TestOperationsListsEveryObject(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(mqlite_\\w+)` \\| (?:table|index|trigger|view) \\|").FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	b := testdb.Open(t, mqlite.Config{})
	for _, name := range testdb.Strings(t, b.Store.DB(), `SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\_%' ESCAPE '\'`) {
		if !listed[name] {
			t.Errorf("docs/operations.md does not list %s", name)
		}
		delete(listed, name)
	}
	for name := range listed {
		t.Errorf("docs/operations.md lists %s, which a store does not make", name)
	}
}
