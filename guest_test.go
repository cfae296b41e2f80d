package mqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// appTables are tables an application may well have, of the names the
// store's tables had before they took the mqlite_ prefix, with an index and
// a trigger of the names the store's had.
const appTables = `
CREATE TABLE queues (name TEXT PRIMARY KEY, note TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, author TEXT, text TEXT);
CREATE TABLE message_bodies (id INTEGER PRIMARY KEY, body BLOB);
CREATE TABLE dedup (k TEXT);
CREATE TABLE settlement_receipts (k TEXT);
CREATE TABLE receive_attempts (k TEXT);
CREATE TABLE topics (name TEXT, forum TEXT);
CREATE TABLE subscriptions (user TEXT, plan TEXT);
CREATE TABLE access_keys (k TEXT);
CREATE TABLE schedules (name TEXT, at TEXT);
CREATE INDEX idx_msg_active ON messages (author);
CREATE TABLE audit (what TEXT);
CREATE TRIGGER trg_body_delete AFTER INSERT ON messages BEGIN INSERT INTO audit (what) VALUES ('message ' || NEW.id); END;
INSERT INTO queues VALUES ('support', 'the help desk'), ('sales', NULL);
INSERT INTO messages (author, text) VALUES ('ann', 'hello'), ('bob', 'hi ann');
INSERT INTO message_bodies VALUES (1, x'00ff');
INSERT INTO dedup VALUES ('d'); INSERT INTO settlement_receipts VALUES ('r'); INSERT INTO receive_attempts VALUES ('a');
INSERT INTO topics VALUES ('go', 'golang-nuts'); INSERT INTO subscriptions VALUES ('ann', 'pro'), ('bob', 'free');
INSERT INTO access_keys VALUES ('k'); INSERT INTO schedules VALUES ('standup', '09:30');
`

// appRows returns every row and the DDL of the application's objects.
func appRows(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range []string{"queues", "messages", "message_bodies", "dedup", "settlement_receipts",
		"receive_attempts", "topics", "subscriptions", "access_keys", "schedules", "audit"} {
		out[table] = testdb.Rows(t, db, table)
	}
	out["ddl"] = testdb.Strings(t, db, `SELECT name || ': ' || sql FROM sqlite_schema WHERE name NOT LIKE 'mqlite\_%' ESCAPE '\' AND sql IS NOT NULL ORDER BY name`)
	return out
}

// TestAStoreBesideTheApplicationsTables: a file whose application already
// has tables (with rows), an index and a trigger of the names the store
// once used takes a store, and a whole workload (queues, a topic, a
// schedule, keys, sends in the application's own transactions, every
// settlement) leaves every application object and row as it was, but the
// rows the application's own transactions wrote; the store's counts see
// only its own messages.
func TestAStoreBesideTheApplicationsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(appTables); err != nil {
		t.Fatal(err)
	}
	before := appRows(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	b := testdb.OpenPath(t, path, mqlite.Config{})
	st := b.Store
	if !st.Migration().Created() {
		t.Fatalf("Migration() = %+v, want a new store", st.Migration())
	}
	b.Queue(t, "q", testdb.WorkloadQueue)
	// Each send writes a row of the application's own messages table in
	// the same transaction, as a chat application's outbox would.
	send := func(body string) {
		t.Helper()
		err := st.Tx(ctx, func(tx *mqlite.Tx) error {
			if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO messages (author, text) VALUES ('app', ?)`, body); err != nil {
				return err
			}
			_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte(body)})
			return err
		})
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
	}
	want := testdb.MetricsWorkload(t, st, "q", send, b.Clock)
	if err := st.CreateTopic(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSubscription(ctx, "events", "audit-copy", mqlite.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "events", Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateActive}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteQueue(ctx, "audit-copy"); err != nil {
		t.Fatal(err)
	}

	stats, err := st.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Counters != want.Counters {
		t.Errorf("counters %+v, want %+v: the application's own messages table was counted", stats.Counters, want.Counters)
	}
	after := appRows(t, st.DB())
	// The workload's six sends each added a row to the application's
	// messages, and its trigger one to audit; nothing else changed.
	if n := len(after["messages"]) - len(before["messages"]); n != 6 || !slices.Equal(after["messages"][:2], before["messages"]) {
		t.Errorf("the application's messages: %q, want its two rows and the six it wrote", after["messages"])
	}
	if n := len(after["audit"]) - len(before["audit"]); n != 6 {
		t.Errorf("the application's trigger ran %d times, want 6", n)
	}
	for table, rows := range before {
		if table == "messages" || table == "audit" {
			continue
		}
		if !slices.Equal(after[table], rows) {
			t.Errorf("the application's %s changed:\n got  %q\n want %q", table, after[table], rows)
		}
	}
}
