package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver, for the application's own file

	"github.com/mqlite/mqlite/schema"
)

// readCommands are the commands that only read a store.
var readCommands = [][]string{
	{"stats"}, {"stats", "orders"}, {"peek", "orders"}, {"dlq", "list", "orders"},
	{"queues", "list"}, {"topics", "list"}, {"schedules", "list"}, {"keys", "list"},
}

// filesIn lists the names in dir.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// appFile writes an application's own SQLite file, in WAL mode or not, with
// tables of the names the unprefixed layout had, and returns its path.
func appFile(t *testing.T, wal bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if wal {
		if _, err := db.Exec(`PRAGMA journal_mode = WAL`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`CREATE TABLE messages (id INTEGER PRIMARY KEY, text TEXT);
		INSERT INTO messages (text) VALUES ('hello');
		CREATE TABLE queues (name TEXT)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadCommandsNeverWrite: a command that only reads, on a missing file,
// exits 1 saying there is no store and leaves no file behind; on an
// application's SQLite file without mqlite's schema it exits 1 and leaves
// the file byte-identical, with no -wal, -shm or lock file beside it.
func TestReadCommandsNeverWrite(t *testing.T) {
	t.Parallel()
	for _, args := range readCommands {
		t.Run(strings.Join(args, " ")+"/missing file", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			_, stderr, code := cliErr(t, nil, "", append(args, "--db", filepath.Join(dir, "typo.db"))...)
			if code != 1 || !strings.Contains(stderr, "no store at") {
				t.Fatalf("exit %d, stderr %q; want 1 and \"no store at\"", code, stderr)
			}
			if left := filesIn(t, dir); len(left) != 0 {
				t.Fatalf("left %v behind", left)
			}
		})
		for _, wal := range []bool{false, true} {
			t.Run(strings.Join(args, " ")+map[bool]string{false: "/app file", true: "/app file in WAL mode"}[wal], func(t *testing.T) {
				t.Parallel()
				path := appFile(t, wal)
				before, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				_, stderr, code := cliErr(t, nil, "", append(args, "--db", path)...)
				if code != 1 || !strings.Contains(stderr, "no mqlite schema") {
					t.Fatalf("exit %d, stderr %q; want 1 saying the file has no mqlite schema", code, stderr)
				}
				after, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if string(after) != string(before) {
					t.Fatal("the application's file changed")
				}
				if left := filesIn(t, filepath.Dir(path)); !slices.Equal(left, []string{"app.db"}) {
					t.Fatalf("files %v, want app.db alone", left)
				}
			})
		}
	}
}

// TestMigrateCommand: the other commands refuse a store of the unprefixed
// layout and say how to migrate it, leaving it untouched; migrate upgrades
// it and says from which version to which; a second migrate is up to date.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../schema/testdata/v3/store.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"stats"}, {"send", "orders", "x"}, {"receive", "orders"}} {
		_, stderr, code := cliErr(t, nil, "", append(args, "--db", path)...)
		if code != 1 || !strings.Contains(stderr, "mqlite migrate --db "+path) {
			t.Fatalf("%v: exit %d, stderr %q; want 1 and the migrate command", args, code, stderr)
		}
	}
	if now, _ := os.ReadFile(path); string(now) != string(b) {
		t.Fatal("a refused command changed the file")
	}
	if out := mustCLI(t, nil, "", "migrate", "--db", path); !strings.Contains(out, fmt.Sprintf("from version 2 to %d", schema.Latest)) {
		t.Fatalf("migrate said %q", out)
	}
	if out := mustCLI(t, nil, "", "migrate", "--db", path); !strings.Contains(out, fmt.Sprintf("up to date (version %d)", schema.Latest)) {
		t.Fatalf("migrate again said %q", out)
	}
	if out := mustCLI(t, nil, "", "stats", "orders", "--db", path); !strings.Contains(out, "orders") {
		t.Fatalf("stats after migrate: %q", out)
	}
	if _, _, code := cliErr(t, nil, "", "migrate", "--url", "http://127.0.0.1:1"); code != 2 {
		t.Fatalf("migrate --url: exit %d, want 2", code)
	}
}

// TestCreatingCommandsSaySoOnce: a command that makes a queue, topic or key
// creates the store in a file that has none and says so on stderr, once.
func TestCreatingCommandsSaySoOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	_, stderr, code := cliErr(t, nil, "", "queues", "create", "orders", "--db", path)
	if code != 0 || strings.Count(stderr, "created a new store at "+path) != 1 {
		t.Fatalf("exit %d, stderr %q; want it to say once that it created the store", code, stderr)
	}
	_, stderr, code = cliErr(t, nil, "", "topics", "create", "events", "--db", path)
	if code != 0 || strings.Contains(stderr, "created") {
		t.Fatalf("exit %d, stderr %q; want nothing said about an existing store", code, stderr)
	}
	out := mustCLI(t, nil, "", "queues", "create", "jobs", "--dedup-by-body", "--json", "--db", path)
	if !strings.Contains(out, `"dedup_by_body": true`) {
		t.Fatalf("queues create --dedup-by-body: %s", out)
	}
	// An application's own file gets the store beside its tables, which
	// stay as they were.
	app := appFile(t, true)
	if _, stderr, code := cliErr(t, nil, "", "keys", "create", "--role", "admin", "--queue", "*", "--db", app); code != 0 ||
		!strings.Contains(stderr, "created a new store") {
		t.Fatalf("keys create on an app file: exit %d, %q", code, stderr)
	}
	db, err := sql.Open("sqlite", app)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var text string
	if err := db.QueryRow(`SELECT text FROM messages WHERE id = 1`).Scan(&text); err != nil || text != "hello" {
		t.Fatalf("the application's row: %q, %v", text, err)
	}
}

// TestSchemaCommand: mqlite schema prints the objects a store adds, every
// one named mqlite_…, and opens no file.
func TestSchemaCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := mustCLI(t, []string{"MQLITE_DB=" + filepath.Join(dir, "x.db")}, "", "schema")
	names := regexp.MustCompile(`(?m)^CREATE (?:UNIQUE )?(?:TABLE|INDEX|TRIGGER|VIEW) (\w+)`).FindAllStringSubmatch(cmd, -1)
	if len(names) < 20 {
		t.Fatalf("schema printed %d objects:\n%s", len(names), cmd)
	}
	for _, n := range names {
		if !strings.HasPrefix(n[1], "mqlite_") {
			t.Errorf("object %s is not named mqlite_…", n[1])
		}
	}
	if left := filesIn(t, dir); len(left) != 0 {
		t.Fatalf("schema left %v", left)
	}
}
