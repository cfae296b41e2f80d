package powerloss_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/schema"
)

// The step tests cut the power at every step of one operation (Backup,
// an upgrade migration): a worker opens the store from a template, waits
// for "go", runs the operation, and says "done". A first run without a cut
// counts the operation's mutating file operations; then, for each step i,
// the power goes right after the i-th.

func init() {
	workers["backup"] = backupWorker
	workers["migrate"] = migrateWorker
}

const backupName = "backup.db"

func backupWorker(ctx context.Context, w workerEnv) error {
	st, err := mqlite.Open(ctx, w.path, openOpts(w.full))
	if err != nil {
		return err
	}
	defer st.Close()
	say("ready")
	if err := waitFor("go"); err != nil {
		return err
	}
	if err := st.Backup(ctx, filepath.Join(filepath.Dir(w.path), backupName)); err != nil {
		return err
	}
	say("done")
	return waitFor("never") // the harness cuts and kills
}

// migrateWorker opens a file of an older layout: Open migrates it. Then
// it closes the store, which checkpoints: the steps cover the migration's
// commit and its way into the file.
func migrateWorker(ctx context.Context, w workerEnv) error {
	say("ready")
	if err := waitFor("go"); err != nil {
		return err
	}
	st, err := mqlite.Open(ctx, w.path, openOpts(w.full))
	if err != nil {
		return err
	}
	if err := st.Close(); err != nil {
		return err
	}
	say("done")
	return waitFor("never")
}

// stepRun is one run of a step test's worker over a copy of a template.
type stepRun struct {
	r     *rig
	steps int  // mutating operations from "go" to "done"
	done  bool // the operation finished before the cut
}

// runStep copies the files of template into a new folder, runs worker on
// it with a cut after step operations (0: no cut before "done"), cuts the
// power at the latest once the worker is done, and returns the folder.
func runStep(t *testing.T, template, worker string, full bool, step int) stepRun {
	t.Helper()
	r := newRig(t)
	copyFiles(t, template, r.backing)
	r.powerOn()
	p := r.start(worker, plDB, 1, 1, full)
	p.expect("ready", nil)
	before := r.fs.Ops()
	if step > 0 {
		r.fs.CutAfter(step, nil)
	}
	p.tell("go")
	run := stepRun{r: r}
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
wait:
	for {
		select {
		case <-r.fs.Done():
			break wait
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("step %d: worker ended\n%s", step, p.stderr)
			}
			f := strings.Fields(line)
			p.check(f)
			if len(f) > 0 && f[0] == "done" {
				run.done = true
				run.steps = r.fs.Ops() - before
				if _, err := r.fs.Cut(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
				break wait
			}
		case <-timeout.C:
			t.Fatalf("step %d: neither done nor cut\n%s", step, p.stderr)
		}
	}
	p.kill(nil)
	r.powerOff()
	if _, err := r.fs.Result(); err != nil {
		t.Fatalf("step %d: cut: %v", step, err)
	}
	return run
}

// stepsToCut is every step in make crash, about ten spread over the
// operation in make test.
func stepsToCut(n int) []int {
	stride := 1
	if os.Getenv("MQLITE_POWERLOSS_CUTS") == "" {
		stride = max(1, n/10)
	}
	var out []int
	for i := 1; i <= n; i += stride {
		out = append(out, i)
	}
	if out[len(out)-1] != n {
		out = append(out, n)
	}
	return out
}

func copyFiles(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

const backupMessages = 300

// backupTemplate is a closed store with backupMessages messages.
func backupTemplate(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := mqlite.Open(ctx, filepath.Join(dir, plDB), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, plQueue, mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, backupMessages)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "message %d %s", i, strings.Repeat("b", 200))}
	}
	_, err = outbox.Send(ctx, st, plQueue, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPowerLossBackup cuts the power at every step of a Backup: after
// each, the destination does not exist, or it is a whole copy that opens
// as a store with every message; the source passes integrity_check.
func TestPowerLossBackup(t *testing.T) {
	t.Parallel()
	template := backupTemplate(t)
	whole := runStep(t, template, "backup", false, 0)
	if !whole.done {
		t.Fatal("the backup without a cut did not finish")
	}
	if !checkBackup(t, whole.r, 0) {
		t.Fatal("Backup returned, and a cut after it took the destination")
	}
	absent, complete, leftovers := 0, 0, 0
	steps := stepsToCut(whole.steps)
	for _, step := range steps {
		run := runStep(t, template, "backup", false, step)
		if !integrity(t, run.r.onDisk(plDB)) {
			t.Fatalf("step %d: the source store is gone", step)
		}
		if checkBackup(t, run.r, step) {
			complete++
		} else {
			absent++
		}
		matches, _ := filepath.Glob(run.r.onDisk("." + backupName + ".mqlite-backup-*"))
		leftovers += len(matches)
	}
	t.Logf("a Backup takes %d file operations; cut after %d of them: destination absent %d times, whole %d times (%d messages each), never partial; %d temporary files left behind",
		whole.steps, len(steps), absent, complete, backupMessages, leftovers)
}

// checkBackup reports whether the backup exists, and fails unless it is
// whole.
func checkBackup(t *testing.T, r *rig, step int) bool {
	t.Helper()
	path := r.onDisk(backupName)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return false
	}
	integrity(t, path)
	st, err := mqlite.Open(context.Background(), path, openOpts(false))
	if err != nil {
		t.Fatalf("step %d: the backup does not open: %v", step, err)
	}
	defer st.Close()
	stats, err := st.Stats(context.Background(), plQueue)
	if err != nil {
		t.Fatalf("step %d: backup stats: %v", step, err)
	}
	if stats.Active != backupMessages {
		t.Fatalf("step %d: the backup holds %d messages, want %d", step, stats.Active, backupMessages)
	}
	return true
}

// migrationFixtures are the files of the earlier layouts, each with a row
// of every kind, that the schema package's upgrade tests start from (made
// by make.go beside each), by the table that holds their messages: the
// layout before the mqlite_ prefix (guard token mqlite-schema-3), the
// first prefixed one (mqlite-schema-4), the one in which a completion
// wrote a receipt row (mqlite-schema-5), the one before scheduled
// messages were indexed by id (mqlite-schema-6), the one before
// settled_at (mqlite-schema-7), the one whose states were IN lists
// (mqlite-schema-8), the one whose receive attempts kept the broker's
// commit records (mqlite-schema-9), the one before priorities
// (mqlite-schema-10), the one before the history of failed deliveries
// (mqlite-schema-11), and the one whose group triggers ran for every
// message (mqlite-schema-12). Every upgrade but the unprefixed layout's and
// mqlite-schema-12's runs two migrations or more, each in its own
// transaction: a cut between them leaves the layout of mqlite-schema-5, of
// mqlite-schema-7, of mqlite-schema-9, of mqlite-schema-10, of
// mqlite-schema-11 or of mqlite-schema-12 (between).
var migrationFixtures = []struct {
	name, file, messages string
	between              []string
}{
	{"v3", "../schema/testdata/v3/store.db", "messages", nil},
	{"v4", "../schema/testdata/v4/store.db", "mqlite_messages", []string{"../schema/testdata/v5/store.db", sharedAttemptsFile, commitsFile, priorityFile, attemptsFile}},
	{"v5", "../schema/testdata/v5/store.db", "mqlite_messages", []string{sharedAttemptsFile, commitsFile, priorityFile, attemptsFile}},
	{"v6", "../schema/testdata/v6/store.db", "mqlite_messages", []string{"../schema/testdata/v7/store.db", sharedAttemptsFile, commitsFile, priorityFile, attemptsFile}},
	{"v7", "../schema/testdata/v7/store.db", "mqlite_messages", []string{sharedAttemptsFile, commitsFile, priorityFile, attemptsFile}},
	{"v8", "../schema/testdata/v8/store.db", "mqlite_messages", []string{sharedAttemptsFile, commitsFile, priorityFile, attemptsFile}},
	{"v9", sharedAttemptsFile, "mqlite_messages", []string{commitsFile, priorityFile, attemptsFile}},
	{"v10", commitsFile, "mqlite_messages", []string{priorityFile, attemptsFile}},
	{"v11", priorityFile, "mqlite_messages", []string{attemptsFile}},
	{"v12", attemptsFile, "mqlite_messages", nil},
}

// sharedAttemptsFile is the fixture of mqlite-schema-9, the layout before
// mqlite_commits, commitsFile that of mqlite-schema-10, the layout
// before priorities, priorityFile that of mqlite-schema-11, the layout
// before the history of failed deliveries, and attemptsFile that of
// mqlite-schema-12, the layout whose group triggers ran for every message.
const (
	sharedAttemptsFile = "../schema/testdata/v9/store.db"
	commitsFile        = "../schema/testdata/v10/store.db"
	priorityFile       = "../schema/testdata/v11/store.db"
	attemptsFile       = "../schema/testdata/v12/store.db"
)

// commitRecords counts the broker's commit records of the file at path,
// whose tables' names begin with prefix: in the receive attempts, under a
// queue name that begins with "/commit/" (the layouts before
// mqlite_commits), and in mqlite_commits.
func commitRecords(t *testing.T, path, prefix string) int {
	t.Helper()
	n := 0
	if rawCount(t, path, `SELECT count(*) FROM pragma_table_info('`+prefix+`receive_attempts') WHERE name = 'queue'`) == 1 {
		n = rawCount(t, path, `SELECT count(*) FROM `+prefix+`receive_attempts WHERE queue LIKE '/commit/%'`)
	}
	if rawCount(t, path, `SELECT count(*) FROM sqlite_schema WHERE name = 'mqlite_commits'`) == 1 {
		n += rawCount(t, path, `SELECT count(*) FROM mqlite_commits`)
	}
	return n
}

// migrationTemplate is a folder holding a copy of a fixture, and the
// number of messages in it.
func migrationTemplate(t *testing.T, file, messages string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	copyFile(t, file, filepath.Join(dir, plDB))
	return dir, rawCount(t, filepath.Join(dir, plDB), `SELECT count(*) FROM `+messages)
}

// layout is a file's tables, indexes and triggers with their SQL. goose's
// version is left out: the upgrade from the unprefixed layout leaves the
// current layout in one transaction and records the next, empty,
// migration in another, so a cut between the two leaves the new layout at
// an older version, which the next Open records.
func layout(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema WHERE name <> 'mqlite_migrations' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s\n", typ, name, text)
	}
	return b.String()
}

// TestPowerLossMigration cuts the power at every step of an Open that
// upgrades a file of each earlier layout (the schema package's fixtures):
// after each, the file passes integrity_check and holds the old layout or
// the new one, nothing in between; Open then finishes the upgrade with
// every message and every commit record of the broker (moved out of the
// receive attempts).
func TestPowerLossMigration(t *testing.T) {
	t.Parallel()
	for _, f := range migrationFixtures {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			powerLossMigration(t, f.file, f.messages, f.between)
		})
	}
}

func powerLossMigration(t *testing.T, file, table string, betweenFiles []string) {
	between := map[string]bool{} // the layouts a cut between two migrations leaves
	for _, f := range betweenFiles {
		dir, _ := migrationTemplate(t, f, "mqlite_messages")
		between[layout(t, filepath.Join(dir, plDB))] = true
	}
	syncModes(t, func(t *testing.T, name string, full bool) {
		template, messages := migrationTemplate(t, file, table)
		commits := commitRecords(t, filepath.Join(template, plDB), strings.TrimSuffix(table, "messages"))
		old := layout(t, filepath.Join(template, plDB))
		whole := runStep(t, template, "migrate", full, 0)
		if !whole.done {
			t.Fatal("the migration without a cut did not finish")
		}
		upgraded := layout(t, whole.r.onDisk(plDB))
		if upgraded == old {
			t.Fatal("the migration changed nothing")
		}
		outcomes := map[string]int{}
		steps := stepsToCut(whole.steps)
		for _, step := range steps {
			run := runStep(t, template, "migrate", full, step)
			path := run.r.onDisk(plDB)
			if !integrity(t, path) {
				t.Fatalf("step %d: the file is gone", step)
			}
			switch got := layout(t, path); {
			case got == old:
				outcomes["old"]++
			case got == upgraded:
				outcomes["new"]++
			case between[got]:
				outcomes["between"]++
			default:
				t.Fatalf("step %d: the file holds neither layout:\n%s", step, layout(t, path))
			}
			st, err := mqlite.Open(context.Background(), path, openOpts(false))
			if err != nil {
				t.Fatalf("step %d: open after the cut: %v", step, err)
			}
			var n int
			err = st.DB().QueryRow(`SELECT count(*) FROM ` + tableMessages).Scan(&n)
			if err := errors.Join(err, st.Close()); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if n != messages {
				t.Fatalf("step %d: %d messages after the upgrade, want %d", step, n, messages)
			}
			if n := commitRecords(t, path, "mqlite_"); n != commits {
				t.Fatalf("step %d: %d commit records after the upgrade, want %d", step, n, commits)
			}
			if layout(t, path) != upgraded {
				t.Fatalf("step %d: Open after the cut left another layout", step)
			}
			if v := rawCount(t, path, `SELECT max(version_id) FROM mqlite_migrations`); v != schema.Latest {
				t.Fatalf("step %d: goose version %d after Open, want %d", step, v, schema.Latest)
			}
		}
		t.Logf("synchronous=%s: an upgrading Open and Close take %d file operations; cut after %d of them: old layout %d times, new layout %d times, between two migrations %d times, never a mix",
			name, whole.steps, len(steps), outcomes["old"], outcomes["new"], outcomes["between"])
	})
}
