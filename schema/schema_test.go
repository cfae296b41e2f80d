package schema_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

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
	b := testdb.Open(t, mqlite.Options{})
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
	tests := []struct {
		name      string
		prepare   func(t *testing.T, db *sql.DB)
		wantFresh bool
		wantErr   error
	}{
		{"new file", func(*testing.T, *sql.DB) {}, true, nil},
		{"current token", func(t *testing.T, db *sql.DB) {
			if err := schema.Apply(ctx, db); err != nil {
				t.Fatal(err)
			}
		}, false, nil},
		{"other token", func(t *testing.T, db *sql.DB) {
			if err := schema.Apply(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`UPDATE mqlite_guard SET token = 'mqlite-schema-0'`); err != nil {
				t.Fatal(err)
			}
		}, false, mqlite.ErrSchemaVersionMismatch},
		{"guard table without a token", func(t *testing.T, db *sql.DB) {
			if err := schema.Apply(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`DELETE FROM mqlite_guard`); err != nil {
				t.Fatal(err)
			}
		}, false, mqlite.ErrSchemaVersionMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := plainDB(t)
			tc.prepare(t, db)
			before := dumpSchema(t, db)
			fresh, err := schema.Check(ctx, db)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Check: %v", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Check: %v, want %v", err, tc.wantErr)
			}
			if fresh != tc.wantFresh {
				t.Fatalf("fresh = %v, want %v", fresh, tc.wantFresh)
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
	if _, err := db.Exec(`INSERT INTO queues VALUES ('q', 'standard', 1, 1, 0, 0, 0, 0, 0, 0, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var versions, queues int
		var token string
		err := db.QueryRow(`SELECT (SELECT count(*) FROM `+schema.VersionTable+`),
			(SELECT count(*) FROM queues), (SELECT token FROM mqlite_guard)`).Scan(&versions, &queues, &token)
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

// TestUpgradeFromInit: a file written when 00001_init was the last
// migration (by the binary before schedules) opens as it is: the guard
// token is unchanged, goose applies 00002_schedules, the queues and
// messages stay, and schedules work.
func TestUpgradeFromInit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := database.NewStore(database.DialectSQLite3, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, schema.Migrations(),
		goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO queues VALUES ('q', 'standard', 1, 1000, 0, 0, 0, 0, 0, 0, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := mqlite.Open(ctx, path, mqlite.Options{ScheduleInterval: -1})
	if err != nil {
		t.Fatalf("open a file of the previous schema: %v", err)
	}
	defer st.Close()
	if _, err := st.GetQueue(ctx, "q"); err != nil {
		t.Fatalf("the old queue is gone: %v", err)
	}
	if err := st.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Hour}); err != nil {
		t.Fatalf("CreateSchedule on the upgraded file: %v", err)
	}
	var versions int
	if err := st.DB().QueryRow(`SELECT max(version_id) FROM ` + schema.VersionTable).Scan(&versions); err != nil || versions != 2 {
		t.Fatalf("goose version %d (%v), want 2", versions, err)
	}
}
