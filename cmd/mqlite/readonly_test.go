package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// readOnlyCommands are the commands that only read, with the arguments
// that make each read something of the store pgReadStore makes.
var readOnlyCommands = [][]string{
	{"peek", "orders"},
	{"peek", "orders", "--json"},
	{"find", "orders"},
	{"queues", "list"},
	{"stats"},
	{"stats", "orders"},
	{"dlq", "list", "orders"},
	{"topics", "list"},
	{"schedules", "list"},
	{"keys", "list"},
}

// pgReadStore makes a store at u with a row of most kinds: messages
// active, locked (a lease already lapsed, which a reaper would take back)
// and dead-lettered, a topic with a subscription, a schedule and a key.
func pgReadStore(t *testing.T, u string) {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, u, mqlite.Config{ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateQueue(ctx, "orders", mqlite.QueueOptions{LockDuration: 100 * time.Millisecond, MaxDeliveryCount: 5}))
	must(st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "orders", []outbox.Message{
			{Body: []byte("one"), MessageID: "m1"}, {Body: []byte("two")}, {Body: []byte("three")}})
		return err
	}))
	ms, err := st.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 2})
	must(err)
	must(st.Reject(ctx, ms[1].Lock(), "bad", "a bad order"))
	must(st.CreateTopic(ctx, "events"))
	must(st.CreateSubscription(ctx, "events", "audit", mqlite.SubscriptionOptions{}))
	must(st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "orders", Every: time.Hour, Body: []byte("tick")}))
	_, _, err = keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	must(err)
}

// pgState is everything a read could change in the schema of the
// pgtest.URL u, read through admin: the layout (relations, columns,
// indexes, functions, triggers), every row of every table, every
// sequence's position.
func pgState(t *testing.T, admin *sql.DB, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	schemaName := p.Query().Get("search_path")
	var layout string
	if err := admin.QueryRow(`SELECT coalesce(string_agg(x, E'\n' ORDER BY x), '') FROM (
		SELECT c.relkind::text || ' ' || c.relname || ' ' || coalesce(pg_get_indexdef(c.oid), '') FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL SELECT 'function ' || p.proname || ' ' || md5(p.prosrc) FROM pg_proc p
			JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		UNION ALL SELECT 'trigger ' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal
		UNION ALL SELECT 'sequence ' || sequencename || ' ' || coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = $1
	) s(x)`, schemaName).Scan(&layout); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(layout)
	rows, err := admin.Query(`SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, schemaName)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	for _, table := range tables {
		var n int64
		var digest sql.NullString
		if err := admin.QueryRow(`SELECT count(*), md5(string_agg(t::text, E'\n' ORDER BY t::text)) FROM `+
			schemaName+`.`+table+` t`).Scan(&n, &digest); err != nil {
			t.Fatal(err)
		}
		b.WriteString("\nrows " + table + " " + digest.String + " " + strings.Repeat("|", int(min(n, 50))))
	}
	return b.String()
}

// selectOnlyRole makes a role that may log in and read every table of
// the schema of u, and nothing else, and returns u as that role. It is
// dropped when t ends.
func selectOnlyRole(t *testing.T, admin *sql.DB, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	schemaName := p.Query().Get("search_path")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "mqlite_ro_" + hex.EncodeToString(b)
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schemaName + ` TO ` + role,
		`GRANT SELECT ON ALL TABLES IN SCHEMA ` + schemaName + ` TO ` + role,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := admin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	p.User = url.User(role)
	return p.String()
}

// openAdmin is a handle on u as the role of the URL.
func openAdmin(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestReadOnlyCommandsPostgres: every command that only reads runs, given
// a postgres:// URL, as a role that may only SELECT (the server would
// refuse any write, a migration's or a sweep's), and, as the owner, leaves
// the schema and every row as they were, though the store holds a lapsed
// lease that a store which writes ends at its next peek. The controls:
// that peek by a store that writes changes what the check reads; a
// command that writes (queues pause) fails as that role, and as the owner
// changes what the check reads.
func TestReadOnlyCommandsPostgres(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	pgReadStore(t, u)
	admin := openAdmin(t, u)
	ro := selectOnlyRole(t, admin, u)
	before := pgState(t, admin, u)
	env := []string{"MQLITE_DB=", "MQLITE_URL="}
	for _, args := range readOnlyCommands {
		for _, who := range []struct{ name, url string }{{"select-only role", ro}, {"owner", u}} {
			out := mustCLI(t, env, "", append(args, "--db", who.url)...)
			if strings.TrimSpace(out) == "" {
				t.Errorf("mqlite %s as the %s printed nothing", strings.Join(args, " "), who.name)
			}
			if after := pgState(t, admin, u); after != before {
				t.Fatalf("mqlite %s as the %s changed the schema:\nbefore %s\nafter  %s", strings.Join(args, " "), who.name, before, after)
			}
		}
	}
	// The controls. A peek by a store that writes catches the queue up
	// (the lapsed lease ends): the reads above had something to write.
	st, err := mqlite.Open(context.Background(), u, mqlite.Config{ExistingOnly: true, ReaperInterval: -1, SchedulerInterval: -1,
		TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Peek(context.Background(), "orders", mqlite.PeekParams{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := pgState(t, admin, u); after == before {
		t.Fatal("control: a peek by a store that writes changed nothing: the reads had nothing to write")
	}
	before = pgState(t, admin, u)
	_, stderr, code := cliErr(t, env, "", "queues", "pause", "orders", "--db", ro)
	if code == 0 || !strings.Contains(stderr, "permission denied") {
		t.Fatalf("control: queues pause as the select-only role: exit %d, %q; want a refusal of the server", code, stderr)
	}
	mustCLI(t, env, "", "queues", "pause", "orders", "--db", u)
	if after := pgState(t, admin, u); after == before {
		t.Fatal("control: queues pause as the owner changed nothing the check reads")
	}
	t.Logf("%d read-only commands, each as a select-only role and as the owner, changed nothing; the control (queues pause) was refused as the select-only role: %s",
		len(readOnlyCommands), strings.TrimSpace(stderr))
}

// TestReadOnlyCommandsRefuseWithoutTheLayout: given a PostgreSQL schema
// without mqlite's layout, or with an older one (the committed fixture of
// mqlite-postgres-1), every read-only command fails with the error that
// says so (no store there; migrate first), and creates or upgrades
// nothing.
func TestReadOnlyCommandsRefuseWithoutTheLayout(t *testing.T) {
	t.Parallel()
	env := []string{"MQLITE_DB=", "MQLITE_URL="}
	fresh := pgtest.URL(t)
	freshAdmin := openAdmin(t, fresh)
	older := pgtest.URL(t)
	olderAdmin := openAdmin(t, older)
	script, err := os.ReadFile("../../schema/testdata/postgres-v1/store.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := olderAdmin.Exec(string(script)); err != nil {
		t.Fatalf("load the fixture of mqlite-postgres-1: %v", err)
	}
	for _, c := range []struct {
		name, url, want string
		admin           *sql.DB
	}{
		{"no layout", fresh, "no store at", freshAdmin},
		{"the layout mqlite-postgres-1", older, "has an older layout", olderAdmin},
	} {
		before := pgState(t, c.admin, c.url)
		for _, args := range readOnlyCommands {
			stdout, stderr, code := cliErr(t, env, "", append(args, "--db", c.url)...)
			if code != 1 || !strings.Contains(stdout+stderr, c.want) {
				t.Errorf("%s: mqlite %s: exit %d, %q; want 1 and %q", c.name, strings.Join(args, " "), code, stderr, c.want)
			}
			if after := pgState(t, c.admin, c.url); after != before {
				t.Fatalf("%s: mqlite %s changed the schema:\nbefore %s\nafter  %s", c.name, strings.Join(args, " "), before, after)
			}
		}
	}
}
