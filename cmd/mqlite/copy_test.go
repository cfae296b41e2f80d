package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
)

// TestCopyCommand runs the recipe of docs/operations.md ("Moving an
// application from SQLite to PostgreSQL") against a new database on the
// test server, on a file with a queue and three messages: the first copy
// prints its counts, the second says already copied, and the database
// holds the messages. --json gives the report, and a copy without --to or
// with a broker is a usage error.
func TestCopyCommand(t *testing.T) {
	t.Parallel()
	const docURL = "postgres://app@db.internal:5432/app"
	var recipe []string
	for _, b := range shellBlocks(t, "docs/operations.md") {
		if strings.Contains(strings.Join(b.lines, "\n"), "mqlite copy") {
			recipe = b.lines
		}
	}
	if len(recipe) == 0 {
		t.Fatal("docs/operations.md has no block with mqlite copy")
	}
	to, pg := testdb.Postgres(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "app.db")
	mustCLI(t, nil, "", "queues", "create", "orders", "--db", db)
	for _, body := range []string{`{"id":1}`, `{"id":2}`, `{"id":3}`} {
		mustCLI(t, nil, "", "send", "orders", body, "--db", db)
	}
	script := "set -euo pipefail\n" + strings.ReplaceAll(strings.Join(recipe, "\n"), docURL, to)
	if !strings.Contains(script, to) {
		t.Fatalf("the recipe does not copy into %s:\n%s", docURL, script)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary(t))+":"+os.Getenv("PATH"), "MQLITE_DB=", "MQLITE_URL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the recipe: %v\n%s", err, out)
	}
	t.Logf("the recipe:\n%s", out)
	for _, want := range []string{"copied app.db into", "already copied", "active 3"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the recipe's output has no %q", want)
		}
	}
	var n int
	if err := pg.QueryRow(`SELECT count(*) FROM mqlite_messages WHERE queue = 'orders'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("the database holds %d messages (%v), want 3", n, err)
	}
	var rep mqlite.CopyReport
	if err := json.Unmarshal([]byte(mustCLI(t, nil, "", "copy", "--db", db, "--to", to, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.AlreadyCopied || rep.Messages != 3 || rep.Queues != 1 {
		t.Errorf("--json: %+v", rep)
	}
	for _, args := range [][]string{
		{"copy", "--from", db},
		{"copy", "--from", db, "--to", "other.db"},
		{"copy", "--to", to},
		{"copy", "--to", to, "--url", "http://127.0.0.1:1"},
	} {
		if _, stderr, code := cliErr(t, []string{"MQLITE_DB="}, "", args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr)
		}
	}
}
