package schema_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/schema"
)

// A fixture is a committed file of an earlier layout with a row of every
// kind, made by make.go beside it with the code of that layout.
type fixture struct {
	dir     string
	token   string   // its guard token
	version int64    // the last goose migration it recorded
	prefix  string   // what its tables' names begin with
	tables  []string // its tables, without the prefix
}

// tables are the tables of both earlier layouts, without a prefix.
var tables = []string{"queues", "messages", "message_bodies", "dedup", "settlement_receipts",
	"receive_attempts", "topics", "subscriptions", "access_keys", "schedules"}

var (
	// unprefixedFixture is the layout before the mqlite_ prefix.
	unprefixedFixture = fixture{dir: "testdata/v3", token: "mqlite-schema-3", version: 2, tables: tables}
	// prefixedFixture is the first prefixed layout: no paused_at, no
	// last_error, receive attempts in a WITHOUT ROWID table.
	prefixedFixture = fixture{dir: "testdata/v4", token: "mqlite-schema-4", version: 3, prefix: "mqlite_", tables: tables}
	// receiptFixture is the layout in which a completion deleted its
	// message and wrote a receipt row.
	receiptFixture = fixture{dir: "testdata/v5", token: "mqlite-schema-5", version: 4, prefix: "mqlite_", tables: tables}
	// completedRowFixture is the layout in which a completion left its
	// row completed as its receipt, before scheduled messages were indexed
	// by id.
	completedRowFixture = fixture{dir: "testdata/v6", token: "mqlite-schema-6", version: 5, prefix: "mqlite_", tables: tables}
	// settledFixture is the layout before settled_at: a completed message
	// kept its completion moment in locked_until, AUTOINCREMENT numbered
	// the messages and a trigger wrote their dedup rows.
	settledFixture = fixture{dir: "testdata/v7", token: "mqlite-schema-7", version: 6, prefix: "mqlite_", tables: tables}
	// inListFixture is the layout whose CHECK of the state, group probe
	// index and handover trigger named their states in IN lists; its
	// message sequence is the floor in mqlite_sequence.
	inListFixture = fixture{dir: "testdata/v8", token: "mqlite-schema-8", version: 7, prefix: "mqlite_", tables: tables}
	// sharedAttemptsFixture is the layout whose receive attempts' table
	// kept the broker's commit records too, under the queue name
	// "/commit/<access key id>".
	sharedAttemptsFixture = fixture{dir: "testdata/v9", token: "mqlite-schema-9", version: 8, prefix: "mqlite_", tables: tables}
	// commitsFixture is the layout before priorities: the broker's commit
	// records in mqlite_commits, no priority column, the claim index in
	// (queue, id) order.
	commitsFixture = fixture{dir: "testdata/v10", token: "mqlite-schema-10", version: 9, prefix: "mqlite_", tables: tables}
	// priorityFixture is the layout before the history of failed
	// deliveries: priorities, and a message's last error alone.
	priorityFixture = fixture{dir: "testdata/v11", token: "mqlite-schema-11", version: 10, prefix: "mqlite_", tables: tables}
	// attemptsFixture is the layout whose three group triggers on an
	// update of a message's state ran for every message.
	attemptsFixture = fixture{dir: "testdata/v12", token: "mqlite-schema-12", version: 11, prefix: "mqlite_", tables: tables}
)

// commitPrefix begins the queue name of a commit record in the attempts'
// table of the layouts before mqlite_commits.
const commitPrefix = "/commit/"

// commitColumns are the columns of mqlite_commits, and commitsOf reads
// them from the attempts' table of a layout before it.
var commitColumns = []string{"id", "scope", "idempotency_key", "request", "result", "expires_at"}

// from returns what rowsOf reads as table in the fixture's layout: the
// receive attempts without the broker's commit records, which leave them
// for mqlite_commits.
func (f fixture) from(table string) string {
	if table == "receive_attempts" {
		return `(SELECT * FROM ` + f.prefix + table + ` WHERE queue NOT LIKE '` + commitPrefix + `%')`
	}
	return f.prefix + table
}

// commitsOf reads the broker's commit records of the file of the fixture's
// layout, as commitColumns: from mqlite_commits in a layout that has it.
func (f fixture) commitsOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	if testdb.Int(t, db, `SELECT count(*) FROM sqlite_schema WHERE name = 'mqlite_commits'`) == 1 {
		return rowsOf(t, db, "mqlite_commits", commitColumns)
	}
	if !slices.Contains(columnsOf(t, db, f.prefix+"receive_attempts"), "id") {
		return nil // a layout before the broker, whose attempts had no id
	}
	return rowsOf(t, db, `(SELECT id, substr(queue, `+fmt.Sprint(len(commitPrefix)+1)+`) AS scope,
		attempt_id AS idempotency_key, request, result, expires_at
		FROM `+f.prefix+`receive_attempts WHERE queue LIKE '`+commitPrefix+`%')`, commitColumns)
}

// floored reports whether the fixture's layout keeps the message sequence
// as a floor in mqlite_sequence, where older ones kept it in
// sqlite_sequence.
func (f fixture) floored() bool { return f.version >= inListFixture.version }

// fixtureExpect is what make.go wrote beside the file.
type fixtureExpect struct {
	T0                                      time.Time
	LockedOrder, LockedFIFO, CompletedOrder mqlite.Lock
	AttemptID                               string
	AttemptSeq, DeferredSeq                 int64
	AdminKey, RevokedKey                    string
	// Commits are the broker's commit requests made with AdminKey and
	// their answers (from testdata/v9 on).
	Commits []struct {
		Key, Body string
		Answer    json.RawMessage
	}
}

// copyOf copies the fixture's file into a new folder and returns its path
// and what make.go recorded.
func (f fixture) copyOf(t *testing.T) (string, fixtureExpect) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var exp fixtureExpect
	j, err := os.ReadFile(filepath.Join(f.dir, "expect.json"))
	if err == nil {
		err = json.Unmarshal(j, &exp)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path, exp
}

// rowsOf returns every row of table, each as the SQL literals of cols joined
// by "|", sorted: a text that two tables with the same rows share.
func rowsOf(t *testing.T, db *sql.DB, table string, cols []string) []string {
	t.Helper()
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = "quote(" + c + ")"
	}
	out := testdb.Strings(t, db, `SELECT `+strings.Join(quoted, ` || '|' || `)+` FROM `+table)
	slices.Sort(out)
	return out
}

// columnsOf returns the columns of table.
func columnsOf(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	return testdb.Strings(t, db, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
}

// snapshot is every row of a fixture's tables and its message sequence,
// read with plain database/sql.
type snapshot struct {
	cols    map[string][]string
	rows    map[string][]string
	commits []string // the broker's commit records, as commitColumns
	seq     int64
}

func (f fixture) snapshot(t *testing.T, path string) snapshot {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := snapshot{cols: map[string][]string{}, rows: map[string][]string{}}
	for _, table := range f.tables {
		s.cols[table] = columnsOf(t, db, f.prefix+table)
		s.rows[table] = rowsOf(t, db, f.from(table), s.cols[table])
		if len(s.rows[table]) == 0 {
			t.Fatalf("the fixture's %s is empty: it must hold a row of every kind", table)
		}
	}
	s.commits = f.commitsOf(t, db)
	if f.floored() {
		s.seq = testdb.Int(t, db, `SELECT floor FROM mqlite_sequence`)
	} else {
		s.seq = testdb.Int(t, db, `SELECT seq FROM sqlite_sequence WHERE name = ?`, f.prefix+"messages")
	}
	return s
}

// sequenceAhead moves the copy's message sequence 5 past its newest
// message, as the completion of the 5 newest would have left it: the
// upgrade must carry the sequence (or keep its floor), not derive it from
// the rows it copies.
func (f fixture) sequenceAhead(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if f.floored() {
		_, err = db.Exec(`INSERT OR REPLACE INTO mqlite_sequence (id, floor) SELECT 1, max(id) + 5 FROM mqlite_messages`)
	} else {
		_, err = db.Exec(`UPDATE sqlite_sequence SET seq = seq + 5 WHERE name = ?`, f.prefix+"messages")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// upgrade upgrades a copy of the fixture with today's migrations and checks
// the file: the layout exactly a fresh store's, every row of every table
// there unchanged (the columns the layout added hold their defaults), the
// sequence carried, the guard an older binary refuses. It returns the path
// and what make.go recorded.
func (f fixture) upgrade(t *testing.T) (string, fixtureExpect, snapshot) {
	t.Helper()
	ctx := context.Background()
	path, exp := f.copyOf(t)
	f.sequenceAhead(t, path)
	before := f.snapshot(t, path)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if state, err := schema.Check(ctx, db); err != nil || state != schema.Outdated {
		t.Fatalf("Check: %v, %v, want Outdated", state, err)
	}
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	fresh := testdb.Open(t, mqlite.Config{})
	if got, want := dumpSchema(t, db), dumpSchema(t, fresh.Store.DB()); got != want {
		t.Fatalf("the upgraded layout differs from a fresh one:\n--- upgraded ---\n%s\n--- fresh ---\n%s", got, want)
	}
	if tok, err := schema.GuardToken(ctx, db); err != nil || tok != schema.Token {
		t.Fatalf("guard %q (%v), want %q: an older binary must refuse the file", tok, err, schema.Token)
	}
	if v, err := schema.Version(ctx, db); err != nil || v != schema.Latest {
		t.Fatalf("goose version %d (%v), want %d", v, err, schema.Latest)
	}
	for _, table := range f.tables {
		cols := before.cols[table]
		if table == "messages" && !slices.Contains(cols, "settled_at") {
			// A completed message kept its completion moment in
			// locked_until; settled_at holds it now.
			cols = slices.Clone(cols)
			cols[slices.Index(cols, "locked_until")] = "coalesce(settled_at, locked_until)"
		}
		got := rowsOf(t, db, "mqlite_"+table, cols)
		if !slices.Equal(got, before.rows[table]) {
			t.Errorf("mqlite_%s:\n got  %q\n want %q", table, got, before.rows[table])
		}
	}
	if got := rowsOf(t, db, "mqlite_commits", commitColumns); !slices.Equal(got, before.commits) {
		t.Errorf("mqlite_commits:\n got  %q\n want %q", got, before.commits)
	}
	if !slices.Contains(before.cols["queues"], "paused_at") {
		if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_queues WHERE paused_at <> 0`); n != 0 {
			t.Errorf("%d queues paused by the upgrade", n)
		}
		if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE last_error IS NOT NULL`); n != 0 {
			t.Errorf("%d messages given a last error by the upgrade", n)
		}
	}
	if seq := testdb.Int(t, db, `SELECT floor FROM mqlite_sequence`); seq != before.seq {
		t.Errorf("message sequence floor %d, want %d", seq, before.seq)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM sqlite_sequence WHERE name <> 'mqlite_migrations'`); n != 0 {
		t.Errorf("%d sequence rows of dropped tables left", n)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE state <> 'locked' AND locked_until <> 0`); n != 0 {
		t.Errorf("%d messages without a lease keep a locked_until", n)
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
	return path, exp, before
}

// keptPromises opens the upgraded file and checks that the store keeps
// every promise it had made about the fixture's rows: receipts, attempts,
// dedup by MessageID and by body (body, sent as seq bodySeq to bodyQueue, a
// queue with DedupByBody), groups, dead letters, schedules, keys,
// seqs. Its recovery releases the leases the fixture's process left, as
// after any crash.
func keptPromises(t *testing.T, path string, exp fixtureExpect, before snapshot, bodyQueue, body string, bodySeq int64, queues int) *mqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, path, mqlite.Config{Clock: atClock(exp.T0), ExistingOnly: true,
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1,
		RetentionInterval: -1, ScheduleInterval: -1})
	if err != nil {
		t.Fatalf("open the upgraded file: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("replay a completion from its receipt", st.Complete(ctx, exp.CompletedOrder))
	if err := st.Complete(ctx, exp.LockedOrder); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("complete a lease of the dead process: %v, want ErrLockLost (recovery released it)", err)
	}
	// The attempt is recorded: its replay claims nothing new (its message
	// was released by the recovery), where a new attempt would claim one.
	got, err := st.Receive(ctx, "audit", mqlite.ReceiveOptions{AttemptID: exp.AttemptID})
	if err != nil || len(got) != 0 {
		t.Fatalf("attempt replay gave %d messages (%v), want none", len(got), err)
	}
	if got, err := st.Receive(ctx, "audit", mqlite.ReceiveOptions{AttemptID: "a new attempt"}); err != nil || len(got) != 1 || got[0].Seq != exp.AttemptSeq {
		t.Fatalf("a new attempt gave %+v (%v), want the released seq %d", got, err, exp.AttemptSeq)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_receive_attempts`); n != 2 {
		t.Fatalf("%d receive attempts recorded, want the upgraded one and the new one", n)
	}
	if r := sendOne(t, st, "orders", outbox.Message{Body: []byte(`{"n":2}`), MessageID: "order-2"}); !r.Duplicate || r.Seq != 2 {
		t.Errorf("resend by MessageID: %+v, want a duplicate of seq 2", r)
	}
	if r := sendOne(t, st, bodyQueue, outbox.Message{Body: []byte(body)}); !r.Duplicate || r.Seq != bodySeq {
		t.Errorf("resend of a body on %s: %+v, want a duplicate of seq %d (the queue keeps body dedup)", bodyQueue, r, bodySeq)
	}
	if r := sendOne(t, st, "nodedup", outbox.Message{Body: []byte("new")}); r.Duplicate || r.Seq != before.seq+1 {
		t.Errorf("new message: %+v, want seq %d: seqs go on, never reused", r, before.seq+1)
	}
	dead, err := st.PeekDeadLetters(ctx, "orders", mqlite.PeekParams{})
	must("peek dead letters", err)
	if len(dead) != 1 || dead[0].DeadLetterReason != "bad-order" || dead[0].DeadLetterDescription != "the order has no lines" {
		t.Errorf("dead letters %+v", dead)
	}
	d, err := st.ReceiveDeferred(ctx, "orders", exp.DeferredSeq)
	must("receive the deferred message", err)
	must("complete it", st.Complete(ctx, d.Lock()))
	// FIFO: g1's front, released by the recovery, comes first, then the
	// rest of g1 in order once it is completed (the group triggers); g2's
	// front is deferred and g3's scheduled, so they give nothing.
	ms, err := st.Receive(ctx, "fifo", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(ms) != 1 || ms[0].Seq != exp.LockedFIFO.Seq || ms[0].DeliveryCount != 2 {
		t.Fatalf("fifo gave %+v (%v), want g1's front alone, on its second delivery", ms, err)
	}
	must("complete g1's front", st.Complete(ctx, ms[0].Lock()))
	ms, err = st.Receive(ctx, "fifo", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "g1-2" {
		t.Fatalf("fifo gave %d messages (%v), want g1-2 alone", len(ms), err)
	}
	info, err := st.GetSchedule(ctx, "tick")
	must("get schedule", err)
	if info.Fired != 2 || !info.LastAt.Equal(exp.T0.Add(-30*time.Second)) {
		t.Errorf("schedule tick: fired %d, last %v", info.Fired, info.LastAt)
	}
	if _, err := keys.Authenticate(ctx, st, exp.AdminKey); err != nil {
		t.Errorf("the admin key made before the upgrade: %v", err)
	}
	if _, err := keys.Authenticate(ctx, st, exp.RevokedKey); !errors.Is(err, keys.ErrUnauthorized) {
		t.Errorf("the key revoked before the upgrade: %v, want ErrUnauthorized", err)
	}
	m, err := st.Metrics(ctx)
	must("metrics", err)
	if len(m) != queues {
		t.Errorf("metrics of %d queues, want %d", len(m), queues)
	}
	return st
}

// sendOne sends m to queue in its own transaction.
func sendOne(t *testing.T, st *mqlite.Store, queue string, m outbox.Message) outbox.Result {
	t.Helper()
	var res []outbox.Result
	if err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		var err error
		res, err = outbox.SendBatch(tx.Context(), tx.SQL(), queue, []outbox.Message{m})
		return err
	}); err != nil {
		t.Fatalf("send: %v", err)
	}
	return res[0]
}

// TestUpgradeFromUnprefixed upgrades the committed file of the unprefixed
// layout: every row comes through (leases and tokens included), every queue
// keeps deduplicating bodies as it did, and the store keeps every promise.
func TestUpgradeFromUnprefixed(t *testing.T) {
	t.Parallel()
	path, exp, before := unprefixedFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_queues WHERE dedup_by_body = 0`); n != 0 {
		t.Errorf("%d queues lost body deduplication in the upgrade", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "orders", `{"n":7}`, 7, 5)

	// A queue made after the upgrade does not deduplicate bodies.
	if err := st.CreateQueue(context.Background(), "new", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if a, b := sendOne(t, st, "new", outbox.Message{Body: []byte("same")}), sendOne(t, st, "new", outbox.Message{Body: []byte("same")}); b.Duplicate || a.Seq == b.Seq {
		t.Errorf("the same body twice on a new queue: %+v then %+v, want two messages", a, b)
	}
}

// TestUpgradeFromPrefixed upgrades the committed file of the first prefixed
// layout: the new columns read their defaults, the receive attempts move to
// their keyed table, and the store keeps every promise; then a queue pauses
// and a message keeps a last error on the upgraded file.
func TestUpgradeFromPrefixed(t *testing.T) {
	t.Parallel()
	path, exp, before := prefixedFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if got := testdb.Strings(t, db, `SELECT name FROM mqlite_queues WHERE dedup_by_body = 1`); !slices.Equal(got, []string{"bodies"}) {
		t.Errorf("queues deduplicating bodies: %q, want bodies alone, as before", got)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 6)
	if _, err := st.DB().Exec(`UPDATE mqlite_queues SET paused_at = 1 WHERE name = 'orders'`); err != nil {
		t.Errorf("pause a queue on the upgraded file: %v", err)
	}
	if _, err := st.DB().Exec(`UPDATE mqlite_messages SET last_error = 'boom' WHERE id = ?`, exp.DeferredSeq); err != nil {
		t.Errorf("keep a last error on the upgraded file: %v", err)
	}
}

// TestUpgradeFromReceipts upgrades the committed file of the layout with
// receipt rows: the messages' table is made again with every row, seq,
// lease and token, the paused queue stays paused and the last error kept;
// the store keeps every promise (the receipt of a completion made before
// the upgrade replays, and one made after it replays from its completed row).
func TestUpgradeFromReceipts(t *testing.T) {
	t.Parallel()
	path, exp, before := receiptFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 7)
	ctx := context.Background()
	if got, err := st.Receive(ctx, "paused", mqlite.ReceiveOptions{}); err != nil || len(got) != 0 {
		t.Errorf("the paused queue handed out %d messages (%v), want none", len(got), err)
	}
	if err := st.ResumeQueue(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	got, err := st.Receive(ctx, "paused", mqlite.ReceiveOptions{})
	if err != nil || len(got) != 1 || got[0].LastError != "the handler failed" || got[0].DeliveryCount != 2 {
		t.Fatalf("the resumed queue gave %+v (%v), want p1 with its last error, on its second delivery", got, err)
	}
	if err := st.Complete(ctx, got[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, got[0].Lock()); err != nil {
		t.Errorf("a completion replayed from its completed row: %v", err)
	}
}

// TestUpgradeFromCompletedRows upgrades the committed file of the layout in
// which a completion first left its row completed: every row stays, the scheduled messages are in the new index
// by id (a peek of the scheduled state reads them from it), and the store
// keeps every promise, the completion made before the upgrade replaying
// from its completed row.
func TestUpgradeFromCompletedRows(t *testing.T) {
	t.Parallel()
	path, exp, before := completedRowFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	scheduled := testdb.Strings(t, db, `SELECT queue || ':' || id FROM mqlite_messages WHERE state = 'scheduled' ORDER BY id`)
	indexed := testdb.Strings(t, db, `SELECT queue || ':' || id FROM mqlite_messages INDEXED BY mqlite_msg_scheduled_id
		WHERE queue IN ('orders', 'fifo') AND state = 'scheduled' ORDER BY id`)
	if len(scheduled) < 2 || !slices.Equal(indexed, scheduled) {
		t.Errorf("scheduled messages by id: %q, want every scheduled message %q", indexed, scheduled)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 7)
	got, err := st.Find(context.Background(), "orders", mqlite.FindParams{State: mqlite.StateScheduled})
	if err != nil || len(got.Messages) != 1 || string(got.Messages[0].Body) != `{"n":5}` {
		t.Errorf("find of the scheduled state: %+v (%v), want the one scheduled order", got, err)
	}
}

// TestUpgradeFromSettled upgrades the fixture of the layout before
// settled_at: every row stays, the completed message's completion moment
// moves from locked_until to settled_at (its lease column back to 0), the
// sequence floor carries the sequence past the newest message, and the
// store keeps every promise, the completion made before the upgrade
// replaying from its completed row; a batch sent after it writes its dedup
// rows without the trigger, and a resend finds them.
func TestUpgradeFromSettled(t *testing.T) {
	t.Parallel()
	path, exp, before := settledFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	settled := testdb.Strings(t, db, `SELECT id || ' ' || settled_at || ' ' || locked_until FROM mqlite_messages WHERE settled_at IS NOT NULL`)
	if want := fmt.Sprintf("%d %d 0", exp.CompletedOrder.Seq, exp.T0.UnixMilli()); !slices.Equal(settled, []string{want}) {
		t.Errorf("completed messages %q, want [%s]", settled, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 7)
	ctx := context.Background()
	batch := []outbox.Message{{Body: []byte("a"), MessageID: "after-1"}, {Body: []byte("b"), MessageID: "after-2"}}
	var first []outbox.Result
	if err := st.Tx(ctx, func(tx *mqlite.Tx) (err error) {
		first, err = outbox.SendBatch(tx.Context(), tx.SQL(), "orders", batch)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, m := range batch {
		if r := sendOne(t, st, "orders", m); !r.Duplicate || r.Seq != first[i].Seq {
			t.Errorf("resend of %s: %+v, want a duplicate of seq %d", m.MessageID, r, first[i].Seq)
		}
	}
}

// TestUpgradeFromInLists upgrades the fixture of the layout with IN lists:
// the messages' table is made again with every row of every state, its
// seq, lease, token and settled_at; mqlite_sequence keeps its floor, so a
// send after the upgrade gets a seq above every seq the file ever gave;
// and the store keeps every promise.
func TestUpgradeFromInLists(t *testing.T) {
	t.Parallel()
	path, exp, before := inListFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	states := testdb.Strings(t, db, `SELECT DISTINCT state FROM mqlite_messages ORDER BY state`)
	if want := []string{"active", "completed", "dead_lettered", "deferred", "locked", "scheduled"}; !slices.Equal(states, want) {
		t.Errorf("states %q, want every state %q", states, want)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 7)
}

// TestUpgradeFromSharedAttempts upgrades the fixture of the layout whose
// receive attempts kept the broker's commit records: every record moves
// to mqlite_commits (none stays among the attempts, checked by upgrade and
// by keptPromises' count of attempts), the store keeps every promise, and
// each commit request made before the upgrade, sent again through the
// broker, replays its answer and commits nothing new.
func TestUpgradeFromSharedAttempts(t *testing.T) {
	t.Parallel()
	path, exp, before := sharedAttemptsFixture.upgrade(t)
	if len(before.commits) != 2 || len(exp.Commits) != 2 {
		t.Fatalf("the fixture holds %d commit records for %d commits, want 2 of each", len(before.commits), len(exp.Commits))
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 8)
	srv, err := broker.New(broker.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(srv.Handler())
	defer web.Close()
	messages := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages`)
	for _, c := range exp.Commits {
		req, err := http.NewRequest(http.MethodPost, web.URL+"/v1/commit", strings.NewReader(c.Body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+exp.AdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got, want wire.CommitResponse
		err = json.NewDecoder(resp.Body).Decode(&got)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("commit %s again: %d (%v)", c.Key, resp.StatusCode, err)
		}
		if err := json.Unmarshal(c.Answer, &want); err != nil {
			t.Fatal(err)
		}
		want.Replayed = true
		if !reflect.DeepEqual(got, want) {
			t.Errorf("commit %s again: %+v, want its answer replayed %+v", c.Key, got, want)
		}
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages`); n != messages {
		t.Errorf("%d messages after the replays, want %d: a replay commits nothing", n, messages)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_commits`); n != 2 {
		t.Errorf("%d commit records after the replays, want the 2 upgraded", n)
	}
}

// TestUpgradeFromCommits upgrades the fixture of the layout before
// priorities: every message, in every state, gets priority 0, the claim
// index its priority order, and the store keeps every promise (a group's
// order among them); a message sent after the upgrade with a priority is
// claimed ahead of the older ones.
func TestUpgradeFromCommits(t *testing.T) {
	t.Parallel()
	path, exp, before := commitsFixture.upgrade(t)
	if len(before.commits) != 2 {
		t.Fatalf("the fixture holds %d commit records, want 2", len(before.commits))
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	states := testdb.Strings(t, db, `SELECT DISTINCT state FROM mqlite_messages ORDER BY state`)
	if want := []string{"active", "completed", "dead_lettered", "deferred", "locked", "scheduled"}; !slices.Equal(states, want) {
		t.Errorf("states %q, want every state %q", states, want)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE priority <> 0`); n != 0 {
		t.Errorf("%d messages with a priority after the upgrade, want none", n)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 8)
	ctx := context.Background()
	older := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = 'nodedup' AND state = 'active'`)
	if older == 0 {
		t.Fatal("nodedup holds no claimable message to jump")
	}
	seq := sendOne(t, st, "nodedup", outbox.Message{Body: []byte("urgent"), Priority: 9}).Seq
	got, err := st.Receive(ctx, "nodedup", mqlite.ReceiveOptions{})
	if err != nil || len(got) != 1 || got[0].Seq != seq || got[0].Priority != 9 {
		t.Fatalf("receive after the upgrade: %+v, %v, want seq %d of priority 9 ahead of %d older", got, err, seq, older)
	}
}

// TestUpgradeFromPriorities upgrades the fixture of the layout before the
// history of failed deliveries: every message, in every state, has none
// (its last error stays), the claim keeps its priority order, and a
// failure after the upgrade starts the history of the message it befalls,
// the dead letter of the fixture included.
func TestUpgradeFromPriorities(t *testing.T) {
	t.Parallel()
	path, exp, before := priorityFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE attempts IS NOT NULL`); n != 0 {
		t.Errorf("%d messages with a history after the upgrade, want none", n)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE last_error IS NOT NULL`); n != 2 {
		t.Errorf("%d messages with a last error after the upgrade, want the fixture's 2", n)
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 10)
	ctx := context.Background()
	var got []string
	for range 3 {
		ms, err := st.Receive(ctx, "prio", mqlite.ReceiveOptions{})
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive prio: %+v, %v", ms, err)
		}
		got = append(got, string(ms[0].Body))
		if err := st.AbandonWithReason(ctx, ms[0].Lock(), 0, "after the upgrade"); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"high", "mid", "low"}; !slices.Equal(got, want) {
		t.Errorf("prio claimed %q, want %q", got, want)
	}
	dead, err := st.PeekDeadLetters(ctx, "prio", mqlite.PeekParams{})
	if err != nil || len(dead) != 3 {
		t.Fatalf("prio's dead letters: %d, %v", len(dead), err)
	}
	for _, d := range dead {
		if len(d.Attempts) != 1 || d.Attempts[0].Error != "after the upgrade" || !d.Attempts[0].At.Equal(exp.T0) {
			t.Errorf("dead letter %d: attempts %+v, want the one failure after the upgrade", d.Seq, d.Attempts)
		}
	}
	old, err := st.PeekDeadLetters(ctx, "retried", mqlite.PeekParams{})
	if err != nil || len(old) != 1 || old[0].LastError != "the worker gave up" || old[0].Attempts != nil {
		t.Fatalf("the fixture's dead letter: %+v, %v, want its last error and no history", old, err)
	}
}

// TestUpgradeFromAttempts upgrades the fixture of the layout whose group
// triggers ran for every message: no row changes (every held flag as the
// old triggers left it), and the groups go on in order under the new
// program, one in flight per group: g1 after its front, g2 behind its
// deferred front, and on "groups" g5 behind its front and g4, whose front
// was dead-lettered, with that front redriven back ahead of the member
// that leads meanwhile.
func TestUpgradeFromAttempts(t *testing.T) {
	t.Parallel()
	path, exp, before := attemptsFixture.upgrade(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	held := testdb.Strings(t, db, `SELECT body || ':' || state || ':' || held
		FROM mqlite_messages WHERE group_id IS NOT NULL ORDER BY id`)
	want := []string{"g1-1:locked:0", "g1-2:active:1", "g1-3:active:1", "g2-1:deferred:0", "g2-2:active:1",
		"g3-1:scheduled:0", "g3-2:active:1", "g5-1:locked:0", "g5-2:active:1", "g4-1:dead_lettered:0", "g4-2:active:0"}
	if !slices.Equal(held, want) {
		t.Errorf("the groups after the upgrade:\n got  %q\n want %q", held, want)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE attempts IS NOT NULL`); n == 0 {
		t.Error("the fixture's history of failed deliveries is gone")
	}
	bodySeq := testdb.Int(t, db, `SELECT id FROM mqlite_messages WHERE queue = 'bodies'`)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// keptPromises takes g1's front and then g1-2 on "fifo", one at a time.
	st := keptPromises(t, path, exp, before, "bodies", "same", bodySeq, 11)
	ctx := context.Background()
	// Redrive g4-1: it rejoins ahead of g4-2, which waits again.
	if n, err := st.Redrive(ctx, "groups", mqlite.RedriveOptions{}); err != nil || n != 1 {
		t.Fatalf("redrive groups: %d, %v, want g4-1", n, err)
	}
	if got := testdb.Strings(t, st.DB(), `SELECT body || ':' || held FROM mqlite_messages WHERE group_id = 'g4' ORDER BY id`); !slices.Equal(got, []string{"g4-1:0", "g4-2:1"}) {
		t.Errorf("g4 after the redrive: %q, want g4-1 leading and g4-2 held", got)
	}
	var batches [][]string
	for range 5 {
		ms, err := st.Receive(ctx, "groups", mqlite.ReceiveOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		var batch []string
		for _, m := range ms {
			batch = append(batch, string(m.Body))
			if err := st.Complete(ctx, m.Lock()); err != nil {
				t.Fatal(err)
			}
		}
		batches = append(batches, batch)
	}
	// g5's front, released by the recovery, and g4's redriven front first,
	// one of each group; then the next of each.
	if got, want := fmt.Sprint(batches), "[[g5-1 g4-1] [g5-2 g4-2]]"; got != want {
		t.Errorf("groups gave %s after the upgrade, want %s", got, want)
	}
	// g2's deferred front completed releases g2-2; g1-2 is still locked
	// and g3's front scheduled, so g2-2 comes alone.
	d, err := st.ReceiveDeferred(ctx, "fifo", testdb.Int(t, st.DB(), `SELECT id FROM mqlite_messages WHERE group_id = 'g2' AND state = 'deferred'`))
	if err != nil {
		t.Fatalf("receive g2's deferred front: %v", err)
	}
	if err := st.Complete(ctx, d.Lock()); err != nil {
		t.Fatal(err)
	}
	ms, err := st.Receive(ctx, "fifo", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "g2-2" {
		t.Fatalf("fifo gave %+v (%v) after g2's front, want g2-2 alone", ms, err)
	}
}

// atClock is a fixed clock.
type atClock time.Time

func (c atClock) Now() time.Time { return time.Time(c) }

// TestUpgradeFromBeforeSchedules: a file of the unprefixed layout made
// before schedules existed (goose version 1, no schedules table) upgrades
// too, and schedules work on it.
func TestUpgradeFromBeforeSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, _ := unprefixedFixture.copyOf(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TABLE schedules; DELETE FROM ` + schema.VersionTable + ` WHERE version_id = 2`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := mqlite.Open(ctx, path, mqlite.Config{ScheduleInterval: -1})
	if err != nil {
		t.Fatalf("open a version-1 file: %v", err)
	}
	defer st.Close()
	if m := st.Migration(); m.From != 1 || m.To != schema.Latest {
		t.Fatalf("Migration() = %+v", m)
	}
	if _, err := st.GetQueue(ctx, "orders"); err != nil {
		t.Fatalf("the old queue is gone: %v", err)
	}
	if err := st.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: "orders", Every: time.Hour}); err != nil {
		t.Fatalf("CreateSchedule on the upgraded file: %v", err)
	}
}

// TestUpgradeFailsWhole: a step of the upgrade that fails (here, a table of
// the old layout is missing) rolls the whole upgrade back, says which step,
// and leaves the file as it was.
func TestUpgradeFailsWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, _ := unprefixedFixture.copyOf(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DROP TABLE receive_attempts`); err != nil {
		t.Fatal(err)
	}
	before := dumpSchema(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = mqlite.Open(ctx, path, mqlite.Config{})
	if !errors.Is(err, mqlite.ErrMigration) || !strings.Contains(err.Error(), "receive_attempts") {
		t.Fatalf("Open: %v, want ErrMigration naming receive_attempts", err)
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if after := dumpSchema(t, db); after != before {
		t.Fatalf("a failed upgrade changed the layout:\n%s", after)
	}
	if n := testdb.Int(t, db, `SELECT max(version_id) FROM `+schema.VersionTable); n != 2 {
		t.Fatalf("goose version %d after a failed upgrade, want 2", n)
	}
}

// TestExistingOnlyRefusesTheUnprefixedLayout: with Config.ExistingOnly an
// older layout is ErrMigrationNeeded and is not touched; Migrate upgrades it
// and says so.
func TestExistingOnlyRefusesTheUnprefixedLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, _ := unprefixedFixture.copyOf(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mqlite.Open(ctx, path, mqlite.Config{ExistingOnly: true}); !errors.Is(err, mqlite.ErrMigrationNeeded) {
		t.Fatalf("Open(ExistingOnly): %v, want ErrMigrationNeeded", err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(orig) {
		t.Fatal("a refused open changed the file")
	}
	m, err := mqlite.Migrate(ctx, path, mqlite.Config{})
	if err != nil || m.From != 2 || m.To != schema.Latest {
		t.Fatalf("Migrate: %+v, %v", m, err)
	}
	if m, err = mqlite.Migrate(ctx, path, mqlite.Config{}); err != nil || m.From != schema.Latest {
		t.Fatalf("Migrate again: %+v, %v, want up to date", m, err)
	}
	st, err := mqlite.Open(ctx, path, mqlite.Config{ExistingOnly: true})
	if err != nil {
		t.Fatalf("Open(ExistingOnly) after Migrate: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
