package schema_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/schema"
)

// The migration crash test: a child process (this test binary, re-run as
// TestMigrationCrashChild) upgrades a copy of a fixture of an earlier layout
// and SIGKILLs itself after a chosen step of the upgrade, inside its one
// transaction; or the parent kills it at a random moment while it upgrades
// a larger file. Each time, the file the dead process left must hold the old
// layout whole or the new one whole, never a mix, and then upgrade with
// every row there.

const (
	envMigrateChild = "MQLITE_MIGRATE_CHILD" // the file to upgrade; set only in the child
	envMigrateKill  = "MQLITE_MIGRATE_KILL"  // the step after which the child kills itself
	stepPrefix      = "STEP "
)

// migrationRandomKills is how many random-moment kills TestMigrationCrash
// makes in all, spread evenly across the fixtures (each such kill upgrades
// a large file twice, where a kill after a step upgrades the small
// fixture), and migrationStepKills after how many of each upgrade's steps
// it kills the child (0: after every one); make crash (build tag
// crash_injection) kills after every step and at many more moments.
var migrationRandomKills, migrationStepKills = 10, 6

// TestMigrationCrashChild is the child process; it does nothing unless the
// crash test started it.
func TestMigrationCrashChild(t *testing.T) {
	path := os.Getenv(envMigrateChild)
	if path == "" {
		t.Skip("runs only as the migration crash test's child process")
	}
	killAfterStep()
	if _, err := mqlite.Migrate(context.Background(), path, mqlite.Config{}); err != nil {
		t.Fatalf("child migrate: %v", err)
	}
	fmt.Println("migrated")
}

// killAfterStep makes a child process print each step of an upgrade and
// SIGKILL itself after the one envMigrateKill names, and says it started.
func killAfterStep() {
	kill := os.Getenv(envMigrateKill)
	schema.SetAfterStep(func(step string) {
		fmt.Printf("%s%s\n", stepPrefix, step)
		if step == kill {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	})
	fmt.Println("started")
}

// startChild starts the child on path, killing itself after step ("" for
// never), and returns it with its stdout.
func startChild(t *testing.T, path, step string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	return startTestChild(t, "TestMigrationCrashChild", envMigrateChild+"="+path, envMigrateKill+"="+step)
}

// startTestChild starts this test binary again, running the test named
// test alone with env added to its environment, and returns it with its
// stdout.
func startTestChild(t *testing.T, test string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

// layoutOf says which layout the file holds, the fixture's ("old"),
// today's ("new") or, for a fixture older than receiptFixture, that one's
// ("between": a later migration, in its own transaction, was killed after
// an earlier one committed), failing on a mix.
func (f fixture) layoutOf(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	token, err := schema.GuardToken(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check after the kill: %q, %v", check, err)
	}
	layout := layoutText(t, db)
	switch {
	case token == f.token && layout == f.layout(t):
		return "old"
	case token == schema.Token && layout == freshLayout(t):
		return "new"
	case f.version < receiptFixture.version && token == receiptFixture.token && layout == receiptFixture.layout(t):
		return "between"
	case f.version < settledFixture.version && token == settledFixture.token && layout == settledFixture.layout(t):
		return "before settled"
	case f.version < sharedAttemptsFixture.version && token == sharedAttemptsFixture.token && layout == sharedAttemptsFixture.layout(t):
		return "before commits"
	case f.version < commitsFixture.version && token == commitsFixture.token && layout == commitsFixture.layout(t):
		return "before priority"
	case f.version < priorityFixture.version && token == priorityFixture.token && layout == priorityFixture.layout(t):
		return "before attempts"
	case f.version < attemptsFixture.version && token == attemptsFixture.token && layout == attemptsFixture.layout(t):
		return "before group moves"
	}
	t.Fatalf("a mix of layouts: token %q, layout:\n%s", token, layout)
	return ""
}

// counts reads the rows of the tables that hold messages, by layout, and
// the receive attempts and the broker's commit records apart, wherever the
// layout keeps them.
func counts(t *testing.T, path, prefix string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	for _, table := range []string{"queues", "messages", "message_bodies", "dedup", "settlement_receipts", "schedules"} {
		fmt.Fprintf(&b, "%s=%d ", table, testdb.Int(t, db, `SELECT count(*) FROM `+prefix+table))
	}
	shared := `SELECT count(*) FROM ` + prefix + `receive_attempts WHERE queue LIKE '` + commitPrefix + `%'`
	commits := shared
	if testdb.Int(t, db, `SELECT count(*) FROM sqlite_schema WHERE name = 'mqlite_commits'`) == 1 {
		commits = `SELECT (` + shared + `) + (SELECT count(*) FROM mqlite_commits)`
	}
	fmt.Fprintf(&b, "attempts=%d commits=%d", testdb.Int(t, db, `SELECT count(*) FROM `+prefix+`receive_attempts`)-testdb.Int(t, db, shared),
		testdb.Int(t, db, commits))
	return b.String()
}

// copyFile copies src to a new file dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationCrash kills each upgrade after every one of its steps, and at
// random moments of the upgrade of a larger file: the old layout or the new
// one every time, then an upgrade that loses nothing.
func TestMigrationCrash(t *testing.T) {
	t.Parallel()
	fixtures := []fixture{unprefixedFixture, prefixedFixture, receiptFixture, completedRowFixture, settledFixture, inListFixture,
		sharedAttemptsFixture, commitsFixture, priorityFixture, attemptsFixture}
	for i, f := range fixtures {
		randomKills := migrationRandomKills / len(fixtures)
		if i < migrationRandomKills%len(fixtures) {
			randomKills++
		}
		t.Run(f.token, func(t *testing.T) {
			t.Parallel()
			f.crash(t, randomKills)
		})
	}
}

// crash kills the upgrade of a copy of the fixture after its steps
// (migrationStepKills) and at randomKills random moments.
func (f fixture) crash(t *testing.T, randomKills int) {
	fixture, _ := f.copyOf(t)
	want := counts(t, fixture, f.prefix)
	dir := t.TempDir()

	// A run without a kill lists the steps.
	listed := filepath.Join(dir, "list.db")
	copyFile(t, fixture, listed)
	cmd, out := startChild(t, listed, "")
	var steps []string
	for out.Scan() {
		if s, ok := strings.CutPrefix(out.Text(), stepPrefix); ok {
			steps = append(steps, s)
		}
	}
	// The smallest upgrade, one index and the guard, has two.
	if err := cmd.Wait(); err != nil || len(steps) < 2 {
		t.Fatalf("the listing run: %v, steps %q", err, steps)
	}
	stepCount := len(steps)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	if k := migrationStepKills; k > 0 && k < len(steps) {
		// The first and the last step, and others at random.
		rest := steps[1 : len(steps)-1]
		rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
		steps = append([]string{steps[0], steps[len(steps)-1]}, rest[:k-2]...)
	}
	for i, step := range steps {
		path := filepath.Join(dir, fmt.Sprintf("step-%d.db", i))
		copyFile(t, fixture, path)
		cmd, out := startChild(t, path, step)
		for out.Scan() {
		}
		if err := cmd.Wait(); err == nil {
			t.Fatalf("the child survived step %q", step)
		}
		got := f.layoutOf(t, path)
		from := f.version
		switch got {
		case "new":
			t.Fatalf("killed after %q, inside a transaction: the file holds the new layout", step)
		case "between":
			from = receiptFixture.version
		case "before settled":
			from = settledFixture.version
		case "before commits":
			from = sharedAttemptsFixture.version
		case "before priority":
			from = commitsFixture.version
		case "before attempts":
			from = priorityFixture.version
		case "before group moves":
			from = attemptsFixture.version
		}
		if m, err := mqlite.Migrate(context.Background(), path, mqlite.Config{}); err != nil || m.From != from {
			t.Fatalf("upgrade after the kill at %q: %+v, %v", step, m, err)
		}
		if got := counts(t, path, "mqlite_"); got != want {
			t.Fatalf("after the kill at %q and the upgrade: %s, want %s", step, got, want)
		}
	}

	// Random moments, on a file large enough for the upgrade to take a
	// while: before it began, inside it, or after it committed.
	big := filepath.Join(dir, "big.db")
	copyFile(t, fixture, big)
	f.grow(t, big, 10_000)
	wantBig := counts(t, big, f.prefix)
	seen := map[string]int{}
	for i := range randomKills {
		path := filepath.Join(dir, fmt.Sprintf("random-%d.db", i))
		copyFile(t, big, path)
		cmd, out := startChild(t, path, "")
		if !out.Scan() || out.Text() != "started" {
			t.Fatalf("the child did not start: %q", out.Text())
		}
		// Kill after a random number of steps, or at a random point of the
		// one in progress.
		n := rng.IntN(stepCount + 2)
		for j := 0; j < n && out.Scan(); j++ {
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		got := f.layoutOf(t, path)
		seen[got]++
		if _, err := mqlite.Migrate(context.Background(), path, mqlite.Config{}); err != nil {
			t.Fatalf("upgrade after a random kill: %v", err)
		}
		if got := counts(t, path, "mqlite_"); got != wantBig {
			t.Fatalf("after a random kill and the upgrade: %s, want %s", got, wantBig)
		}
	}
	t.Logf("%d kills after a step (never the new layout), %d at random moments: %v", len(steps), randomKills, seen)
}

// grow adds n messages, with their dedup rows, to a copy of the fixture.
func (f fixture) grow(t *testing.T, path string, n int) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)
		INSERT INTO `+f.prefix+`messages (queue, enqueued_at, message_id, content_key, body_len, body)
		SELECT 'nodedup', 1, 'grown-' || i, randomblob(16), 200, randomblob(200) FROM k`, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO ` + f.prefix + `dedup (queue, key, seq, content_key, expires_at)
		SELECT 'nodedup', message_id, id, content_key, 1 FROM ` + f.prefix + `messages WHERE message_id LIKE 'grown-%'`); err != nil {
		t.Fatal(err)
	}
}

// layout is the text of the fixture's layout, as layoutText reads it.
func (f fixture) layout(t *testing.T) string {
	t.Helper()
	path, _ := f.copyOf(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return layoutText(t, db)
}

// freshLayout is the text of a fresh store's layout, as layoutText reads it.
func freshLayout(t *testing.T) string {
	t.Helper()
	return layoutText(t, testdb.Open(t, mqlite.Config{}).Store.DB())
}

// layoutText is the text of every object in the file but goose's table.
func layoutText(t *testing.T, db *sql.DB) string {
	t.Helper()
	return strings.Join(testdb.Strings(t, db, `SELECT sql FROM sqlite_schema
		WHERE sql IS NOT NULL AND name <> 'mqlite_migrations' ORDER BY type, name`), ";\n")
}
