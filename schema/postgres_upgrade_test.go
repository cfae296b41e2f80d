package schema_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/schema"
)

const pgGoldenPath = "testdata/postgres.golden.sql"

// TestPostgresGoldenDDL pins what `mqlite schema --engine postgres`
// prints, and checks that the script, run by hand on an empty schema,
// leaves a store that Open finds up to date, of the layout Open itself
// makes.
func TestPostgresGoldenDDL(t *testing.T) {
	t.Parallel()
	got := schema.PostgresSQL()
	if *update {
		if err := os.WriteFile(pgGoldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", pgGoldenPath)
	} else if want, err := os.ReadFile(pgGoldenPath); err != nil || string(want) != got {
		t.Fatalf("the PostgreSQL DDL differs from %s (%v); if the change is intended, run go test ./schema -update and "+
			"change schema.PostgresToken when old databases cannot be read.\n--- got ---\n%s", pgGoldenPath, err, got)
	}
	ctx := context.Background()
	byHand := pgtest.URL(t)
	db := plainPG(t, byHand)
	if _, err := db.Exec(got); err != nil {
		t.Fatalf("run the script: %v", err)
	}
	if state, err := schema.CheckPostgres(ctx, db); err != nil || state != schema.Current {
		t.Fatalf("CheckPostgres after the script: %v, %v; want Current", state, err)
	}
	opened := pgtest.URL(t)
	st, err := mqlite.Open(ctx, opened, noLoops(nil))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if a, b := pgLayoutText(t, byHand), pgLayoutText(t, opened); a != b {
		t.Fatalf("the script's layout differs from Open's:\n--- script ---\n%s\n--- Open ---\n%s", a, b)
	}
}

// pgLayoutText is the DDL of every object in the schema of the pgtest.URL
// u (pg_dump --schema-only), without the schema's name.
func pgLayoutText(t *testing.T, u string) string {
	t.Helper()
	return pgDump(t, u, "--schema-only")
}

// pgGuard reads the guard token at db, "" when it has none.
func pgGuard(t *testing.T, db *sql.DB) string {
	t.Helper()
	var token string
	if err := db.QueryRow(`SELECT token FROM mqlite_guard`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	return token
}

// checkNames checks that mqlite_names holds every queue's and every
// topic's name, with its kind, and nothing else.
func checkNames(t *testing.T, db *sql.DB) {
	t.Helper()
	want := pgRows(t, db, `(SELECT name, 'queue' AS kind FROM mqlite_queues UNION ALL SELECT name, 'topic' FROM mqlite_topics)`)
	if got := pgRows(t, db, "mqlite_names"); !slices.Equal(got, want) || len(got) == 0 {
		t.Fatalf("mqlite_names:\n got  %q\n want %q", got, want)
	}
}

// TestPostgresUpgradeFromV1 upgrades the committed fixture of the first
// PostgreSQL layout: every row comes through unchanged, mqlite_names holds
// the queues' and topics' names, the layout is a fresh store's, and the
// store keeps every promise it made about the fixture's rows (receive,
// complete, topics publish, dedup, keys...).
func TestPostgresUpgradeFromV1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, exp := loadPGV1(t)
	db := plainPG(t, u)
	before := pgSnapshot(t, db)
	if state, err := schema.CheckPostgres(ctx, db); err != nil || state != schema.Outdated {
		t.Fatalf("CheckPostgres of the fixture: %v, %v; want Outdated", state, err)
	}
	opts := noLoops(atClock(exp.T0))
	opts.ExistingOnly = true
	if _, err := mqlite.Open(ctx, u, opts); !errors.Is(err, mqlite.ErrMigrationNeeded) {
		t.Fatalf("Open with ExistingOnly: %v, want ErrMigrationNeeded", err)
	}
	if got := pgSnapshot(t, db); !mapsEqual(got, before) {
		t.Fatal("the refused Open changed rows")
	}
	m, err := mqlite.Migrate(ctx, u, noLoops(atClock(exp.T0)))
	if err != nil || m.From != 1 || m.To != schema.PostgresLatest {
		t.Fatalf("Migrate: %+v, %v; want from 1 to %d", m, err, schema.PostgresLatest)
	}
	if got := pgSnapshot(t, db); !mapsEqual(got, before) {
		for table, rows := range got {
			if !slices.Equal(rows, before[table]) {
				t.Errorf("%s:\n got  %q\n want %q", table, rows, before[table])
			}
		}
		t.FailNow()
	}
	checkNames(t, db)
	if tok := pgGuard(t, db); tok != schema.PostgresToken {
		t.Fatalf("guard %q, want %q", tok, schema.PostgresToken)
	}
	fresh := pgtest.URL(t)
	st, err := mqlite.Open(ctx, fresh, noLoops(nil))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if a, b := pgLayoutText(t, u), pgLayoutText(t, fresh); a != b {
		t.Fatalf("the upgraded layout differs from a fresh one:\n--- upgraded ---\n%s\n--- fresh ---\n%s", a, b)
	}
	pgKeptPromises(t, u, exp)
}

// TestPostgresUpgradeRefusesANameOfBothKinds: a database of the first
// layout holding a queue and a topic of one name (the gap that layout
// left) is not upgraded: ErrMigration names it, and nothing changes.
func TestPostgresUpgradeRefusesANameOfBothKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, exp := loadPGV1(t)
	db := plainPG(t, u)
	if _, err := db.Exec(`INSERT INTO mqlite_topics (name, created_at) VALUES ('orders', 1)`); err != nil {
		t.Fatal(err)
	}
	before := pgSnapshot(t, db)
	_, err := mqlite.Migrate(ctx, u, noLoops(atClock(exp.T0)))
	if !errors.Is(err, mqlite.ErrMigration) || !strings.Contains(err.Error(), `"orders"`) {
		t.Fatalf("Migrate: %v, want ErrMigration naming orders", err)
	}
	if got := pgSnapshot(t, db); !mapsEqual(got, before) || pgGuard(t, db) != pgV1Token {
		t.Fatal("the refused upgrade changed the database")
	}
	if _, err := db.Exec(`DELETE FROM mqlite_topics WHERE name = 'orders'`); err != nil {
		t.Fatal(err)
	}
	if _, err := mqlite.Migrate(ctx, u, noLoops(atClock(exp.T0))); err != nil {
		t.Fatalf("Migrate once the name is of one kind: %v", err)
	}
	checkNames(t, db)
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

const envPGMigrateChild = "MQLITE_PG_MIGRATE_CHILD" // the URL to upgrade; set only in the child

// TestPostgresMigrationCrashChild is the child process of the PostgreSQL
// migration tests; it does nothing unless one of them started it. It
// upgrades the store at its URL, killing itself after the step
// MQLITE_MIGRATE_KILL names, and says what it did on stdout.
func TestPostgresMigrationCrashChild(t *testing.T) {
	u := os.Getenv(envPGMigrateChild)
	if u == "" {
		t.Skip("runs only as a PostgreSQL migration test's child process")
	}
	killAfterStep()
	m, err := mqlite.Migrate(context.Background(), u, noLoops(nil))
	if err != nil {
		t.Fatalf("child migrate: %v", err)
	}
	fmt.Printf("migrated %d %d\n", m.From, m.To)
}

// startPGChild starts the child on u, killing itself after step ("" for
// never), and returns it with its stdout.
func startPGChild(t *testing.T, u, step string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	return startTestChild(t, "TestPostgresMigrationCrashChild", envPGMigrateChild+"="+u, envMigrateKill+"="+step)
}

// pgLayoutOf says which layout the database at db holds: the fixture's
// ("old": guard mqlite-postgres-1, goose at 1, no mqlite_names) or
// today's ("new": the guard, goose's version and mqlite_names filled), or
// an error naming the mix.
func pgLayoutOf(db *sql.DB) (string, error) {
	var token string
	var version int64
	var names bool
	if err := db.QueryRow(`SELECT (SELECT token FROM mqlite_guard), (SELECT max(version_id) FROM mqlite_migrations WHERE is_applied),
		to_regclass('mqlite_names') IS NOT NULL`).Scan(&token, &version, &names); err != nil {
		return "", err
	}
	switch {
	case token == pgV1Token && version == 1 && !names:
		return "old", nil
	case token == schema.PostgresToken && version == schema.PostgresLatest && names:
		var missing int64
		if err := db.QueryRow(`SELECT count(*) FROM (SELECT name, 'queue' FROM mqlite_queues UNION ALL SELECT name, 'topic' FROM mqlite_topics
			EXCEPT SELECT name, kind FROM mqlite_names) m`).Scan(&missing); err != nil {
			return "", err
		}
		if missing == 0 {
			return "new", nil
		}
		return "", fmt.Errorf("a mix: the new layout with %d names missing", missing)
	}
	return "", fmt.Errorf("a mix of layouts: guard %q, goose version %d, mqlite_names %v", token, version, names)
}

// growPG adds n queues and n topics to the fixture at db, so that the
// upgrade takes long enough to be killed in the middle.
func growPG(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms,
		default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, dedup_by_body, created_at, updated_at)
		SELECT 'grown-q-' || i, 'standard', 5, 30000, 0, 0, false, 0, 0, 0, false, 1, 1 FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO mqlite_topics (name, created_at) SELECT 'grown-t-' || i, 1 FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresMigrationCrash kills a child process upgrading the fixture
// after each step of the upgrade, inside its one transaction, and at
// random moments of the upgrade of a larger store: each time the database
// holds the old layout whole or the new one whole (after a step, inside
// the transaction, always the old), then an Open upgrades it and every
// row is there. The control shows that the check sees a mix: the steps
// committed one by one leave a layout it refuses.
func TestPostgresMigrationCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A run without a kill lists the steps.
	listed, _ := loadPGV1(t)
	cmd, out := startPGChild(t, listed, "")
	var steps []string
	for out.Scan() {
		if s, ok := strings.CutPrefix(out.Text(), stepPrefix); ok {
			steps = append(steps, s)
		}
	}
	if err := cmd.Wait(); err != nil || len(steps) < 3 {
		t.Fatalf("the listing run: %v, steps %q", err, steps)
	}

	for _, step := range steps {
		u, _ := loadPGV1(t)
		db := plainPG(t, u)
		want := pgSnapshot(t, db)
		cmd, out := startPGChild(t, u, step)
		for out.Scan() {
		}
		if err := cmd.Wait(); err == nil {
			t.Fatalf("the child survived step %q", step)
		}
		got, err := pgLayoutOf(db)
		if err != nil || got != "old" {
			t.Fatalf("killed after %q, inside the transaction: %q, %v; want the old layout", step, got, err)
		}
		if m, err := mqlite.Migrate(ctx, u, noLoops(nil)); err != nil || m.From != 1 {
			t.Fatalf("upgrade after the kill at %q: %+v, %v", step, m, err)
		}
		if !mapsEqual(pgSnapshot(t, db), want) {
			t.Fatalf("after the kill at %q and the upgrade, rows changed", step)
		}
		checkNames(t, db)
	}

	// Random moments on a larger store: before the upgrade began, inside
	// it, or after it committed.
	const randomKills = 6
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	seen := map[string]int{}
	for i := range randomKills {
		u, _ := loadPGV1(t)
		db := plainPG(t, u)
		growPG(t, db, 20_000)
		want := pgSnapshot(t, db)
		cmd, out := startPGChild(t, u, "")
		if !out.Scan() || out.Text() != "started" {
			t.Fatalf("the child did not start: %q", out.Text())
		}
		n := rng.IntN(len(steps) + 3)
		for j := 0; j < n && out.Scan(); j++ {
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The server ends the dead child's session (and rolls back its
		// transaction) when it next reads from it; the next Open's
		// migration waits for its advisory lock meanwhile.
		got, err := pgLayoutOf(db)
		if err != nil {
			t.Fatalf("random kill %d after %d lines: %v", i, n, err)
		}
		seen[got]++
		if _, err := mqlite.Migrate(ctx, u, noLoops(nil)); err != nil {
			t.Fatalf("upgrade after a random kill: %v", err)
		}
		if !mapsEqual(pgSnapshot(t, db), want) {
			t.Fatal("after a random kill and the upgrade, rows changed")
		}
		checkNames(t, db)
	}

	// The control: the same steps, each committed on its own (what a
	// migration outside one transaction would leave when killed after its
	// second step), make a database the check refuses.
	u, _ := loadPGV1(t)
	db := plainPG(t, u)
	for _, q := range []string{
		`CREATE TABLE mqlite_names (name text PRIMARY KEY, kind text NOT NULL CHECK (kind IN ('queue', 'topic')))`,
		`INSERT INTO mqlite_names (name, kind) SELECT name, 'queue' FROM mqlite_queues`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := pgLayoutOf(db); err == nil {
		t.Fatalf("control: a half-done upgrade reads as %q", got)
	} else {
		t.Logf("control: a half-done upgrade, committed step by step, is seen: %v", err)
	}
	t.Logf("%d kills after a step (%q), each left the old layout; %d at random moments: %v", len(steps), steps, randomKills, seen)
}

// TestPostgresMigrationTwoProcesses: two processes upgrade the fixture at
// once; the advisory lock lets one migrate and the other find the work
// done: both succeed, goose records version 2 once, every name is there
// once.
func TestPostgresMigrationTwoProcesses(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		u, _ := loadPGV1(t)
		db := plainPG(t, u)
		want := pgSnapshot(t, db)
		var wg sync.WaitGroup
		results := make([]string, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				cmd, out := startPGChild(t, u, "")
				var lines []string
				for out.Scan() {
					lines = append(lines, out.Text())
				}
				errs[i] = cmd.Wait()
				results[i] = strings.Join(lines, "; ")
			})
		}
		wg.Wait()
		for i := range 2 {
			if errs[i] != nil || !strings.Contains(results[i], "migrated") {
				t.Fatalf("round %d, process %d: %v: %s", round, i, errs[i], results[i])
			}
		}
		// One of them ran the upgrade's steps, the other none.
		ran := 0
		for _, r := range results {
			if strings.Contains(r, stepPrefix) {
				ran++
			}
		}
		if ran != 1 {
			t.Fatalf("round %d: %d processes ran the upgrade's steps, want 1: %q", round, ran, results)
		}
		if n := pgInt(t, db, `SELECT count(*) FROM mqlite_migrations WHERE version_id = 2`); n != 1 {
			t.Fatalf("round %d: goose recorded version 2 %d times", round, n)
		}
		if got, err := pgLayoutOf(db); err != nil || got != "new" {
			t.Fatalf("round %d: %q, %v", round, got, err)
		}
		if !mapsEqual(pgSnapshot(t, db), want) {
			t.Fatalf("round %d: rows changed", round)
		}
		checkNames(t, db)
		t.Logf("round %d: %q", round, results)
	}
}

// readOnlyURL is u with every transaction of its sessions READ ONLY.
func readOnlyURL(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Set("default_transaction_read_only", "on")
	p.RawQuery = q.Encode()
	return p.String()
}

// TestPostgresReadOnlySession: Open on a session that cannot write creates
// nothing (ErrNoStore) and upgrades nothing (ErrMigrationNeeded), even
// without ExistingOnly, and leaves the schema as it was; on a store of
// this layout it opens, reads, and a write fails with ErrReadOnly.
func TestPostgresReadOnlySession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := pgtest.URL(t)
	if _, err := mqlite.Open(ctx, readOnlyURL(t, fresh), noLoops(nil)); !errors.Is(err, mqlite.ErrNoStore) {
		t.Fatalf("Open of an empty schema, read only: %v, want ErrNoStore", err)
	}
	if n := pgInt(t, plainPG(t, fresh), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema()`); n != 0 {
		t.Fatalf("the refused Open left %d relations", n)
	}
	older, exp := loadPGV1(t)
	before := pgSnapshot(t, plainPG(t, older))
	if _, err := mqlite.Open(ctx, readOnlyURL(t, older), noLoops(atClock(exp.T0))); !errors.Is(err, mqlite.ErrMigrationNeeded) {
		t.Fatalf("Open of the fixture, read only: %v, want ErrMigrationNeeded", err)
	}
	if !mapsEqual(pgSnapshot(t, plainPG(t, older)), before) || pgGuard(t, plainPG(t, older)) != pgV1Token {
		t.Fatal("the refused Open changed the fixture")
	}
	if _, err := mqlite.Migrate(ctx, older, noLoops(atClock(exp.T0))); err != nil {
		t.Fatal(err)
	}
	st, err := mqlite.Open(ctx, readOnlyURL(t, older), noLoops(atClock(exp.T0.Add(time.Hour))))
	if err != nil {
		t.Fatalf("Open of the upgraded fixture, read only: %v", err)
	}
	defer st.Close()
	before = pgSnapshot(t, plainPG(t, older))
	// An hour on, the leases have lapsed and the scheduled message is due:
	// a store that writes would catch the queue up at this peek.
	if ms, err := st.Peek(ctx, "orders", mqlite.PeekParams{Max: 100}); err != nil || len(ms) == 0 {
		t.Fatalf("peek: %d messages, %v", len(ms), err)
	}
	if _, err := st.Stats(ctx, "orders"); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if !mapsEqual(pgSnapshot(t, plainPG(t, older)), before) {
		t.Fatal("the reads of a read-only store changed rows")
	}
	if err := st.CreateQueue(ctx, "new", mqlite.QueueOptions{}); !errors.Is(err, mqlite.ErrReadOnly) {
		t.Fatalf("a write: %v, want ErrReadOnly", err)
	}
}
