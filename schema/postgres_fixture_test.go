package schema_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/schema"
)

// The fixture of the first PostgreSQL layout, mqlite-postgres-1: a store
// with a row of every kind, dumped (pg_dump, plain SQL, one INSERT per row)
// by the code that wrote that layout, so that every later upgrade is
// tested from it. TestPostgresFixtureV1Make writes it under -update, but
// only with a binary whose layout is still mqlite-postgres-1; at a later
// commit it keeps the committed files, which are the point: they were made
// by the old code. To make them again:
//
//	git checkout <the last commit of layout mqlite-postgres-1> && go test ./schema -run TestPostgresFixtureV1Make -update
const (
	pgV1Dir   = "testdata/postgres-v1"
	pgV1Token = "mqlite-postgres-1"
)

// pgV1T0 is the fixture's clock: it never moves (but for a moment before,
// to create a schedule), so every lease is still valid when a test opens
// the store at pgV1T0.
var pgV1T0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// pgClock is a clock a test moves by hand.
type pgClock struct{ now atomic.Int64 }

// Now is the clock's moment.
func (c *pgClock) Now() time.Time { return time.UnixMilli(c.now.Load()).UTC() }

func newPGClock(at time.Time) *pgClock {
	c := &pgClock{}
	c.now.Store(at.UnixMilli())
	return c
}

// pgV1Expect is what the tests of the fixture need beyond its rows: the
// secrets the store keeps only hashes or results of.
type pgV1Expect struct {
	T0             time.Time
	LockedOrder    mqlite.Lock // a live lease on "orders"
	LockedFIFO     mqlite.Lock // the front of group g1 on "fifo"
	CompletedOrder mqlite.Lock // completed: its receipt replays the completion
	AttemptID      string      // a Receive on "audit" with Max 1
	AttemptSeq     int64
	DeferredSeq    int64
	AdminKey       string // a live admin key over every queue
	RevokedKey     string
}

// noLoops are the options of a store whose background loops are off, so
// that nothing but the test writes.
func noLoops(clk mqlite.Clock) mqlite.Config {
	return mqlite.Config{Clock: clk, ScheduleInterval: -1, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1}
}

// TestPostgresFixtureV1Make makes testdata/postgres-v1 under -update, with
// a binary of layout mqlite-postgres-1 only.
func TestPostgresFixtureV1Make(t *testing.T) {
	if !*update {
		t.Skip("writes the fixture only under -update")
	}
	if schema.PostgresToken != pgV1Token {
		t.Logf("this binary writes layout %s: %s keeps the fixture the code of %s made", schema.PostgresToken, pgV1Dir, pgV1Token)
		return
	}
	ctx := context.Background()
	u := pgtest.URL(t)
	clk := newPGClock(pgV1T0)
	st, err := mqlite.Open(ctx, u, noLoops(clk))
	if err != nil {
		t.Fatal(err)
	}
	exp := populateV1(t, st, clk)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	dump := dumpSchemaPG(t, u)
	if err := os.MkdirAll(pgV1Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pgV1Dir, "expect.json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pgV1Dir, "store.sql"), []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", pgV1Dir)
}

// populateV1 writes a row of every kind into st: queues with every option,
// messages in every state (active, scheduled, locked with its token and
// lease, deferred, dead-lettered with reason and description, waiting
// behind their group, one abandoned with a reason on a paused queue, one
// dead-lettered after its last allowed delivery came back with an error,
// so with its attempt history), messages of three priorities, dedup rows of
// both kinds, a settlement receipt, a receive attempt, a topic with
// filtered subscriptions, schedules (one fired), access keys (one revoked).
func populateV1(t *testing.T, st *mqlite.Store, clk *pgClock) pgV1Expect {
	t.Helper()
	ctx := context.Background()
	exp := pgV1Expect{T0: pgV1T0}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}))
	must(st.CreateQueue(ctx, "fifo", mqlite.QueueOptions{
		Ordering: mqlite.FIFO, LockDuration: time.Minute, MaxDeliveryCount: 3,
		DefaultTTL: time.Hour, DeadLetterOnExpire: true,
		DLQ: mqlite.DLQRetention{MaxAge: 48 * time.Hour, MaxCount: 500, MaxBytes: 1 << 20},
	}))
	must(st.CreateQueue(ctx, "nodedup", mqlite.QueueOptions{DedupWindow: -1, DLQ: mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1}}))
	must(st.CreateQueue(ctx, "bodies", mqlite.QueueOptions{DedupByBody: true}))
	must(st.CreateTopic(ctx, "events"))
	must(st.CreateSubscription(ctx, "events", "audit", mqlite.SubscriptionOptions{}))
	must(st.CreateSubscription(ctx, "events", "big-orders", mqlite.SubscriptionOptions{
		Filter: mqlite.Filter{SubjectPrefix: "order.", Properties: map[string]mqlite.Match{"size": mqlite.In("L", "XL")}},
		Queue:  mqlite.QueueOptions{MaxDeliveryCount: 50},
	}))
	send := func(queue string, msgs ...outbox.Message) {
		t.Helper()
		must(st.Tx(ctx, func(tx *mqlite.Tx) error {
			_, err := outbox.SendBatch(tx.Context(), tx.SQL(), queue, msgs)
			return err
		}))
	}
	receive := func(queue string, opts mqlite.ReceiveOptions) mqlite.Message {
		t.Helper()
		ms, err := st.Receive(ctx, queue, opts)
		must(err)
		if len(ms) != 1 {
			t.Fatalf("receive %s: %d messages", queue, len(ms))
		}
		return ms[0]
	}

	// orders: one message of each state, each received before the next is
	// sent.
	send("orders", outbox.Message{Body: []byte(`{"n":1}`), MessageID: "order-1", Subject: "order.created",
		Properties: map[string]string{"size": "L"}})
	exp.CompletedOrder = receive("orders", mqlite.ReceiveOptions{}).Lock()
	must(st.Complete(ctx, exp.CompletedOrder))
	send("orders", outbox.Message{Body: []byte(`{"n":2}`), MessageID: "order-2"})
	exp.LockedOrder = receive("orders", mqlite.ReceiveOptions{}).Lock()
	send("orders", outbox.Message{Body: []byte(`{"n":3}`)})
	d := receive("orders", mqlite.ReceiveOptions{})
	must(st.Defer(ctx, d.Lock()))
	exp.DeferredSeq = d.Seq
	send("orders", outbox.Message{Body: []byte(`{"n":4}`), MessageID: "order-4"})
	must(st.Reject(ctx, receive("orders", mqlite.ReceiveOptions{}).Lock(), "bad-order", "the order has no lines"))
	send("orders",
		outbox.Message{Body: []byte(`{"n":5}`), DeliverAt: pgV1T0.Add(time.Hour)},
		outbox.Message{Body: []byte(strings.Repeat("large body ", 200)), MessageID: "order-6", TTL: 2 * time.Hour},
		outbox.Message{Body: []byte(`{"n":7}`), Subject: "order.paid", Properties: map[string]string{"a": "1", "b": "2"}},
	)

	// fifo: a group with its front locked and two behind it, a group whose
	// front is deferred, a scheduled group front.
	send("fifo",
		outbox.Message{Body: []byte("g1-1"), GroupID: "g1"},
		outbox.Message{Body: []byte("g1-2"), GroupID: "g1"},
		outbox.Message{Body: []byte("g1-3"), GroupID: "g1", MessageID: "g1-3"},
	)
	exp.LockedFIFO = receive("fifo", mqlite.ReceiveOptions{}).Lock()
	send("fifo", outbox.Message{Body: []byte("g2-1"), GroupID: "g2"}, outbox.Message{Body: []byte("g2-2"), GroupID: "g2"})
	g2 := receive("fifo", mqlite.ReceiveOptions{})
	if g2.GroupID != "g2" {
		t.Fatalf("fifo: received %q, want the front of g2", g2.GroupID)
	}
	must(st.Defer(ctx, g2.Lock()))
	send("fifo", outbox.Message{Body: []byte("g3-1"), GroupID: "g3", DeliverAt: pgV1T0.Add(time.Minute)},
		outbox.Message{Body: []byte("g3-2"), GroupID: "g3"})

	must(st.CreateQueue(ctx, "prio", mqlite.QueueOptions{MaxDeliveryCount: 1}))
	send("prio", outbox.Message{Body: []byte("low")}, outbox.Message{Body: []byte("high"), Priority: 9},
		outbox.Message{Body: []byte("mid"), Priority: 4})
	must(st.CreateQueue(ctx, "retried", mqlite.QueueOptions{MaxDeliveryCount: 1}))
	send("retried", outbox.Message{Body: []byte("r1"), MessageID: "r1"})
	must(st.AbandonWithReason(ctx, receive("retried", mqlite.ReceiveOptions{}).Lock(), 0, "the worker gave up"))
	must(st.CreateQueue(ctx, "paused", mqlite.QueueOptions{}))
	send("paused", outbox.Message{Body: []byte("p1"), MessageID: "p1"})
	must(st.AbandonWithReason(ctx, receive("paused", mqlite.ReceiveOptions{}).Lock(), 0, "the handler failed"))
	must(st.PauseQueue(ctx, "paused"))

	// nodedup: the same body twice, two messages; bodies: the same body
	// twice, one message and its content-key dedup row.
	send("nodedup", outbox.Message{Body: []byte("same")}, outbox.Message{Body: []byte("same")})
	send("bodies", outbox.Message{Body: []byte("same")}, outbox.Message{Body: []byte("same")})

	// events: a fan-out, one copy filtered out of big-orders; a receive
	// with an attempt id on audit.
	send("events", outbox.Message{Body: []byte("e1"), Subject: "order.created", Properties: map[string]string{"size": "XL"}},
		outbox.Message{Body: []byte("e2"), Subject: "invoice.sent"})
	exp.AttemptID = "attempt-1"
	exp.AttemptSeq = receive("audit", mqlite.ReceiveOptions{AttemptID: exp.AttemptID}).Seq

	tick := mqlite.ScheduleOptions{Target: "orders", Every: time.Minute, Body: []byte("tick"), Subject: "tick", TTL: time.Hour}
	clk.now.Store(pgV1T0.Add(-150 * time.Second).UnixMilli())
	must(st.CreateSchedule(ctx, "tick", tick))
	clk.now.Store(pgV1T0.UnixMilli())
	must(st.UpdateSchedule(ctx, "tick", tick))
	if info, err := st.GetSchedule(ctx, "tick"); err != nil || info.Fired != 2 {
		t.Fatalf("schedule tick fired %d periods, want 2 (%v)", info.Fired, err)
	}
	must(st.CreateSchedule(ctx, "nightly", mqlite.ScheduleOptions{Target: "events", Cron: "0 3 * * *",
		TimeZone: "UTC", Body: []byte("nightly")}))

	var err error
	_, exp.AdminKey, err = keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	must(err)
	_, _, err = keys.Create(ctx, st, keys.Scope{Role: keys.Consumer, Queues: []string{"orders", "fifo"}})
	must(err)
	var revoked keys.Key
	revoked, exp.RevokedKey, err = keys.Create(ctx, st, keys.Scope{Role: keys.Producer, Queues: []string{"events"}})
	must(err)
	must(keys.Revoke(ctx, st, revoked.ID))
	return exp
}

// pgSchemaOf returns the schema a pgtest.URL names (its search_path).
func pgSchemaOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Query().Get("search_path")
	if s == "" {
		t.Fatalf("no search_path in %s", p.Redacted())
	}
	return s
}

// dumpLine matches the lines of pg_dump's script that a fixture leaves
// out: comments, blank lines, psql's meta-commands, the settings of
// pg_dump's session, and the lines that name or pick the schema.
var dumpLine = regexp.MustCompile(`^(--.*|\s*|\\.*|SET .*|CREATE SCHEMA .*|SELECT pg_catalog\.set_config\('search_path'.*)$`)

// dumpSchemaPG dumps the schema of the pgtest.URL u as a plain SQL script
// (pg_dump, one INSERT per row with its columns named, no owners nor
// grants) without the schema's name, so that it loads into any schema
// that is first on the search path.
func dumpSchemaPG(t *testing.T, u string) string {
	t.Helper()
	return "-- The fixture of mqlite's PostgreSQL layout " + schema.PostgresToken + " (schema/postgres_fixture_test.go made it,\n" +
		"-- pg_dump wrote it). Load it into a schema first on the search path.\n" +
		pgDump(t, u, "--column-inserts", "--rows-per-insert=1")
}

// pgDump runs pg_dump on the schema of the pgtest.URL u, with no owners,
// grants nor comments and with args, and returns its script without the
// lines dumpLine matches and without the schema's name.
func pgDump(t *testing.T, u string, args ...string) string {
	t.Helper()
	name := pgSchemaOf(t, u)
	p, _ := url.Parse(u)
	conn := url.URL{Scheme: p.Scheme, User: p.User, Host: p.Host, Path: p.Path}
	cmd := exec.Command("pg_dump", append([]string{"--dbname=" + conn.String(), "--schema=" + name, "--no-owner",
		"--no-privileges", "--no-comments"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	var b strings.Builder
	for line := range strings.SplitSeq(string(out), "\n") {
		if !dumpLine.MatchString(line) {
			b.WriteString(strings.ReplaceAll(line, name+".", "") + "\n")
		}
	}
	return b.String()
}

// loadPGV1 loads the fixture into a fresh schema and returns its URL and
// what the fixture expects.
func loadPGV1(t *testing.T) (string, pgV1Expect) {
	t.Helper()
	u := pgtest.URL(t)
	script, err := os.ReadFile(filepath.Join(pgV1Dir, "store.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db := plainPG(t, u)
	if _, err := db.Exec(string(script)); err != nil {
		t.Fatalf("load the fixture: %v", err)
	}
	var exp pgV1Expect
	b, err := os.ReadFile(filepath.Join(pgV1Dir, "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	return u, exp
}

// plainPG is a handle on the database at u, of no store, closed when t
// ends.
func plainPG(t *testing.T, u string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var _ = stdlib.GetDefaultDriver // registers "pgx"

// pgInt runs query, one row of one integer.
func pgInt(t *testing.T, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// pgRows reads every row of table, each as one string, in a fixed order.
func pgRows(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf(`SELECT t::text FROM %s t ORDER BY t::text`, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pgV1Tables are the tables of the layout mqlite-postgres-1.
var pgV1Tables = []string{"mqlite_guard", "mqlite_queues", "mqlite_messages", "mqlite_dedup", "mqlite_settlement_receipts",
	"mqlite_receive_attempts", "mqlite_commits", "mqlite_topics", "mqlite_subscriptions", "mqlite_access_keys",
	"mqlite_schedules", "mqlite_copies"}

// pgSnapshot reads every row of the fixture's tables but the guard.
func pgSnapshot(t *testing.T, db *sql.DB) map[string][]string {
	t.Helper()
	snap := map[string][]string{}
	for _, table := range pgV1Tables[1:] {
		snap[table] = pgRows(t, db, table)
	}
	return snap
}

// TestPostgresFixtureV1 loads the committed fixture of the first
// PostgreSQL layout and checks that it is what it says: every kind of row
// there, the guard and goose's version of that layout.
func TestPostgresFixtureV1(t *testing.T) {
	t.Parallel()
	u, _ := loadPGV1(t)
	db := plainPG(t, u)
	var token string
	if err := db.QueryRow(`SELECT token FROM mqlite_guard`).Scan(&token); err != nil || token != pgV1Token {
		t.Fatalf("guard %q (%v), want %q", token, err, pgV1Token)
	}
	if v := pgInt(t, db, `SELECT max(version_id) FROM mqlite_migrations WHERE is_applied`); v != 1 {
		t.Fatalf("goose version %d, want 1", v)
	}
	for _, c := range []struct {
		what, query string
	}{
		{"active messages", `SELECT count(*) FROM mqlite_messages WHERE state = 'active'`},
		{"scheduled messages", `SELECT count(*) FROM mqlite_messages WHERE state = 'scheduled'`},
		{"locked messages with a lease", `SELECT count(*) FROM mqlite_messages WHERE state = 'locked' AND locked_until > 0`},
		{"deferred messages", `SELECT count(*) FROM mqlite_messages WHERE state = 'deferred'`},
		{"dead letters", `SELECT count(*) FROM mqlite_messages WHERE state = 'dead_lettered'`},
		{"completed messages", `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`},
		{"grouped messages", `SELECT count(*) FROM mqlite_messages WHERE group_id IS NOT NULL`},
		{"attempt histories", `SELECT count(*) FROM mqlite_messages WHERE attempts IS NOT NULL`},
		{"dedup rows by id", `SELECT count(*) FROM mqlite_dedup WHERE kind = 'id'`},
		{"dedup rows by body", `SELECT count(*) FROM mqlite_dedup WHERE kind = 'body'`},
		{"settlement receipts", `SELECT count(*) FROM mqlite_settlement_receipts`},
		{"receive attempts", `SELECT count(*) FROM mqlite_receive_attempts`},
		{"topics", `SELECT count(*) FROM mqlite_topics`},
		{"subscriptions", `SELECT count(*) FROM mqlite_subscriptions`},
		{"access keys", `SELECT count(*) FROM mqlite_access_keys`},
		{"revoked keys", `SELECT count(*) FROM mqlite_access_keys WHERE revoked_at > 0`},
		{"schedules", `SELECT count(*) FROM mqlite_schedules`},
		{"paused queues", `SELECT count(*) FROM mqlite_queues WHERE paused_at > 0`},
	} {
		if n := pgInt(t, db, c.query); n == 0 {
			t.Errorf("the fixture has no %s", c.what)
		}
	}
}

// pgKeptPromises opens the store at u, which holds the fixture (upgraded
// or not), and checks that it keeps every promise it made about the
// fixture's rows: receipts, leases (PostgreSQL releases none at Open: they
// are still valid at T0), attempts, dedup by MessageID and by body, groups,
// dead letters, schedules, keys, seqs, topics. The store is closed when t
// ends.
func pgKeptPromises(t *testing.T, u string, exp pgV1Expect) *mqlite.Store {
	t.Helper()
	ctx := context.Background()
	opts := noLoops(atClock(exp.T0))
	opts.ExistingOnly = true
	st, err := mqlite.Open(ctx, u, opts)
	if err != nil {
		t.Fatalf("open the fixture: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("replay a completion from its receipt", st.Complete(ctx, exp.CompletedOrder))
	must("complete the live lease on orders", st.Complete(ctx, exp.LockedOrder))
	got, err := st.Receive(ctx, "audit", mqlite.ReceiveOptions{AttemptID: exp.AttemptID})
	if err != nil || len(got) != 1 || got[0].Seq != exp.AttemptSeq {
		t.Fatalf("attempt replay gave %+v (%v), want seq %d again", got, err, exp.AttemptSeq)
	}
	if r := sendOne(t, st, "orders", outbox.Message{Body: []byte(`{"n":4}`), MessageID: "order-4"}); !r.Duplicate || r.Seq != 4 {
		t.Errorf("resend by MessageID: %+v, want a duplicate of seq 4", r)
	}
	if r := sendOne(t, st, "bodies", outbox.Message{Body: []byte("same")}); !r.Duplicate {
		t.Errorf("resend of a body on bodies: %+v, want a duplicate", r)
	}
	if r := sendOne(t, st, "nodedup", outbox.Message{Body: []byte("new")}); r.Duplicate || r.Seq <= 28 {
		t.Errorf("new message: %+v, want a seq after the fixture's 28: seqs go on, never reused", r)
	}
	dead, err := st.PeekDeadLetters(ctx, "orders", mqlite.PeekParams{})
	must("peek dead letters", err)
	if len(dead) != 1 || dead[0].DeadLetterReason != "bad-order" || dead[0].DeadLetterDescription != "the order has no lines" {
		t.Errorf("dead letters %+v", dead)
	}
	d, err := st.ReceiveDeferred(ctx, "orders", exp.DeferredSeq)
	must("receive the deferred message", err)
	must("complete it", st.Complete(ctx, d.Lock()))
	// orders: the active messages come in order (the scheduled one waits);
	// the tick schedule's two messages too.
	ms, err := st.Receive(ctx, "orders", mqlite.ReceiveOptions{Max: 10})
	must("receive orders", err)
	if len(ms) != 4 {
		t.Errorf("orders gave %d messages, want 4 (two sent, two fired)", len(ms))
	}
	for _, m := range ms {
		must("complete "+fmt.Sprint(m.Seq), st.Complete(ctx, m.Lock()))
	}
	// FIFO: g1's front is still locked, so the fifo gives nothing of g1;
	// g2's front is deferred, g3's scheduled.
	if ms, err := st.Receive(ctx, "fifo", mqlite.ReceiveOptions{Max: 10}); err != nil || len(ms) != 0 {
		t.Fatalf("fifo gave %+v (%v), want nothing while g1's front is locked", ms, err)
	}
	must("complete g1's front", st.Complete(ctx, exp.LockedFIFO))
	ms, err = st.Receive(ctx, "fifo", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "g1-2" {
		t.Fatalf("fifo gave %d messages (%v), want g1-2 alone", len(ms), err)
	}
	ms, err = st.Receive(ctx, "prio", mqlite.ReceiveOptions{})
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "high" {
		t.Fatalf("prio gave %+v (%v), want the highest priority first", ms, err)
	}
	if ms, err := st.Receive(ctx, "paused", mqlite.ReceiveOptions{}); err != nil || len(ms) != 0 {
		t.Fatalf("paused queue gave %d messages (%v), want none", len(ms), err)
	}
	retried, err := st.PeekDeadLetters(ctx, "retried", mqlite.PeekParams{})
	if err != nil || len(retried) != 1 || len(retried[0].Attempts) != 1 || retried[0].Attempts[0].Error != "the worker gave up" {
		t.Errorf("retried's dead letter %+v (%v), want its attempt history", retried, err)
	}
	info, err := st.GetSchedule(ctx, "tick")
	must("get schedule", err)
	if info.Fired != 2 || !info.LastAt.Equal(exp.T0.Add(-30*time.Second)) {
		t.Errorf("schedule tick: fired %d, last %v", info.Fired, info.LastAt)
	}
	if _, err := keys.Authenticate(ctx, st, exp.AdminKey); err != nil {
		t.Errorf("the admin key of the fixture: %v", err)
	}
	if _, err := keys.Authenticate(ctx, st, exp.RevokedKey); !errors.Is(err, keys.ErrUnauthorized) {
		t.Errorf("the key revoked in the fixture: %v, want ErrUnauthorized", err)
	}
	// Topics: a publish fans out to both subscriptions, the filter holds.
	if err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "events", []outbox.Message{
			{Body: []byte("e3"), Subject: "order.created", Properties: map[string]string{"size": "L"}},
			{Body: []byte("e4"), Subject: "other"}})
		return err
	}); err != nil {
		t.Fatalf("publish to events: %v", err)
	}
	big, err := st.Peek(ctx, "big-orders", mqlite.PeekParams{Max: 10})
	must("peek big-orders", err)
	if len(big) != 2 {
		t.Errorf("big-orders holds %d messages, want 2 (e1 and e3)", len(big))
	}
	if _, err := st.GetTopic(ctx, "events"); err != nil {
		t.Errorf("topic events: %v", err)
	}
	// Names: a queue of a topic's name and a topic of a queue's name are
	// refused.
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{}); !errors.Is(err, mqlite.ErrQueueExists) {
		t.Errorf("a queue named as the topic: %v, want ErrQueueExists", err)
	}
	if err := st.CreateTopic(ctx, "orders"); !errors.Is(err, mqlite.ErrTopicExists) {
		t.Errorf("a topic named as a queue: %v, want ErrTopicExists", err)
	}
	return st
}
