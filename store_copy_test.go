package mqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/schema"
)

// copySource is a store file holding a message in every state and a row
// in every table, closed, and how many messages of each state it holds.
func copySource(t *testing.T) (path string, byState map[string]int64) {
	t.Helper()
	ctx := context.Background()
	tb := testdb.Open(t, mqlite.Config{})
	st, clock := tb.Store, tb.Clock
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateQueue(ctx, "orders", mqlite.QueueOptions{
		MaxDeliveryCount: 7, LockDuration: 45 * time.Second, DedupWindow: time.Hour, DefaultTTL: 48 * time.Hour,
		DeadLetterOnExpire: true, DLQ: mqlite.DLQRetention{MaxAge: 72 * time.Hour, MaxCount: 1000, MaxBytes: 1 << 20},
	}))
	must(st.CreateQueue(ctx, "lines", mqlite.QueueOptions{Ordering: mqlite.FIFO, DedupByBody: true, DedupWindow: time.Hour}))
	must(st.CreateQueue(ctx, "scratch", mqlite.QueueOptions{}))
	must(st.CreateTopic(ctx, "events"))
	must(st.CreateSubscription(ctx, "events", "events-big", mqlite.SubscriptionOptions{
		Filter: mqlite.Filter{Subject: "big", Properties: map[string]mqlite.Match{"region": {In: []string{"eu", "us"}}}},
	}))
	must(st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "orders", Every: time.Minute,
		Body: []byte("tick"), Subject: "tick", Properties: map[string]string{"k": "v"}}))
	if _, _, err := keys.Create(ctx, st, keys.Scope{Role: keys.Producer, Queues: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // kept out of its row
	send := func(queue string, msgs ...outbox.Message) {
		t.Helper()
		if _, err := outbox.Send(ctx, st, queue, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	// orders: one message per state, sent in the order they are taken.
	send("orders",
		outbox.Message{Body: []byte("to lock"), MessageID: "m-lock", Subject: "s", Properties: map[string]string{"a": "1"}},
		outbox.Message{Body: []byte("to defer"), MessageID: "m-defer"},
		outbox.Message{Body: large, MessageID: "m-reject", Priority: 0},
		outbox.Message{Body: []byte("to complete"), MessageID: "m-complete"},
		outbox.Message{Body: []byte("to abandon"), MessageID: "m-abandon"},
	)
	receive := func(queue string, opts mqlite.ReceiveOptions) mqlite.Message {
		t.Helper()
		opts.Max = 1
		msgs, err := st.Receive(ctx, queue, opts)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive %s: %v, %d messages", queue, err, len(msgs))
		}
		return msgs[0]
	}
	locked := receive("orders", mqlite.ReceiveOptions{AttemptID: "attempt-1"})
	must(st.Defer(ctx, receive("orders", mqlite.ReceiveOptions{}).Lock()))
	must(st.Reject(ctx, receive("orders", mqlite.ReceiveOptions{}).Lock(), "poison", "it would not parse"))
	must(st.Complete(ctx, receive("orders", mqlite.ReceiveOptions{}).Lock()))
	must(st.AbandonWithReason(ctx, receive("orders", mqlite.ReceiveOptions{}).Lock(), 0, "try later"))
	if locked.DeliveryCount != 1 {
		t.Fatalf("locked message: delivery count %d", locked.DeliveryCount)
	}
	// Active ones of every priority, a large one, one that expires, and a
	// scheduled one.
	send("orders",
		outbox.Message{Body: []byte("urgent"), Priority: 9, Subject: "u"},
		outbox.Message{Body: large, MessageID: "m-large"},
		outbox.Message{Body: []byte("short-lived"), TTL: time.Minute},
		outbox.Message{Body: []byte("later"), DeliverAt: clock.Now().Add(time.Hour)},
	)
	// lines: a group, and content keys for dedup.
	send("lines",
		outbox.Message{Body: []byte("g1-a"), GroupID: "g1"},
		outbox.Message{Body: []byte("g1-b"), GroupID: "g1"},
		outbox.Message{Body: []byte("g2-a"), GroupID: "g2"},
	)
	_ = receive("lines", mqlite.ReceiveOptions{}) // g1-a in flight holds g1-b
	must(st.PauseQueue(ctx, "lines"))
	// The topic fans out to its subscription through its filter.
	send("events", outbox.Message{Body: []byte("big one"), Subject: "big", Properties: map[string]string{"region": "eu"}},
		outbox.Message{Body: []byte("small one"), Subject: "small"})
	// A commit record, as the broker writes one.
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO mqlite_commits (scope, idempotency_key, request, result, expires_at)
		VALUES ('key-1', 'idem-1', 'digest', X'7b7d', 9999999999999)`); err != nil {
		t.Fatal(err)
	}
	// The newest message goes: its id becomes the sequence's floor, which
	// the target's sequence must pass too.
	send("scratch", outbox.Message{Body: []byte("gone")})
	if n, err := st.Purge(ctx, "scratch", mqlite.PurgeOptions{State: mqlite.StateActive}); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	must(st.Close())
	return tb.Path, map[string]int64{"active": 7, "locked": 2, "deferred": 1, "scheduled": 1,
		"dead_lettered": 1, "completed": 1}
}

// copyChecks are the tables a copy must carry over, each read on both
// sides as rows of values (bytes in hex, flags as 0 or 1) that must match.
var copyChecks = []struct{ table, sqlite, postgres string }{
	{"mqlite_queues",
		`SELECT name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms, default_ttl_ms, dead_letter_on_ttl,
			dlq_max_age_ms, dlq_max_count, dlq_max_bytes, created_at, updated_at, dedup_by_body, paused_at FROM mqlite_queues`,
		`SELECT name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms, default_ttl_ms, dead_letter_on_ttl,
			dlq_max_age_ms, dlq_max_count, dlq_max_bytes, created_at, updated_at, dedup_by_body, paused_at FROM mqlite_queues`},
	{"mqlite_messages",
		`SELECT id, queue, state, visible_at, locked_until, body_len, lock_token, delivery_count, expires_at, enqueued_at,
			message_id, group_id, subject, properties, content_key,
			CASE WHEN state = 'completed' THEN NULL ELSE coalesce(body, (SELECT b.body FROM mqlite_message_bodies b WHERE b.id = m.id)) END,
			dead_letter_reason, dead_letter_desc, dead_lettered_at, last_error, settled_at, priority FROM mqlite_messages m`,
		`SELECT id, queue, state, visible_at, locked_until, body_len, lock_token, delivery_count, expires_at, enqueued_at,
			message_id, group_id, subject, properties, content_key, body,
			dead_letter_reason, dead_letter_desc, dead_lettered_at, last_error, settled_at, priority FROM mqlite_messages`},
	{"mqlite_dedup",
		`SELECT queue, CASE typeof(key) WHEN 'blob' THEN 'body' ELSE 'id' END,
			CASE typeof(key) WHEN 'blob' THEN lower(hex(key)) ELSE key END, seq, content_key, expires_at FROM mqlite_dedup`,
		`SELECT queue, kind, key, seq, content_key, expires_at FROM mqlite_dedup`},
	{"mqlite_settlement_receipts",
		`SELECT seq, lock_token, operation, args, queue, expires_at FROM mqlite_settlement_receipts`,
		`SELECT seq, lock_token, operation, args, queue, expires_at FROM mqlite_settlement_receipts`},
	{"mqlite_receive_attempts",
		`SELECT id, queue, attempt_id, request, result, expires_at FROM mqlite_receive_attempts`,
		`SELECT id, queue, attempt_id, request, result, expires_at FROM mqlite_receive_attempts`},
	{"mqlite_commits",
		`SELECT id, scope, idempotency_key, request, result, expires_at FROM mqlite_commits`,
		`SELECT id, scope, idempotency_key, request, result, expires_at FROM mqlite_commits`},
	{"mqlite_topics", `SELECT name, created_at FROM mqlite_topics`, `SELECT name, created_at FROM mqlite_topics`},
	{"mqlite_subscriptions", `SELECT topic, queue, filter, created_at FROM mqlite_subscriptions`,
		`SELECT topic, queue, filter, created_at FROM mqlite_subscriptions`},
	{"mqlite_access_keys", `SELECT id, secret_hash, scopes, created_at, revoked_at FROM mqlite_access_keys`,
		`SELECT id, secret_hash, scopes, created_at, revoked_at FROM mqlite_access_keys`},
	{"mqlite_schedules",
		`SELECT name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id, subject, properties, ttl_ms,
			next_at, last_at, last_error, fired, skipped, created_at, updated_at FROM mqlite_schedules`,
		`SELECT name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id, subject, properties, ttl_ms,
			next_at, last_at, last_error, fired, skipped, created_at, updated_at FROM mqlite_schedules`},
}

// tableRows reads query on db as one text per row (values joined, bytes
// in hex, flags 0 or 1), sorted: the engines' collations differ.
func tableRows(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case []byte:
				parts[i] = "x" + hex.EncodeToString(v)
			case bool:
				parts[i] = map[bool]string{false: "0", true: "1"}[v]
			default:
				parts[i] = fmt.Sprint(v)
			}
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// openSource opens a store file for the test to read, alongside nothing.
func openSource(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// targetSnapshot is every row of every table of the target, and its
// sequences: what a run that writes nothing leaves as it was.
func targetSnapshot(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, c := range copyChecks {
		fmt.Fprintf(&b, "%s: %q\n", c.table, tableRows(t, db, c.postgres))
	}
	fmt.Fprintf(&b, "copies: %q\n", tableRows(t, db, `SELECT digest, source, copied_at, report FROM mqlite_copies`))
	fmt.Fprintf(&b, "sequences: %q\n", tableRows(t, db, `SELECT last_value, is_called FROM mqlite_messages_id_seq
		UNION ALL SELECT last_value, is_called FROM mqlite_receive_attempts_id_seq
		UNION ALL SELECT last_value, is_called FROM mqlite_commits_id_seq`))
	return b.String()
}

// TestCopyToPostgres copies a store holding every state and every kind of
// row, then reads every row of every table on both sides and compares them
// column by column; a second run answers "already copied" and changes
// nothing.
func TestCopyToPostgres(t *testing.T) {
	to, pg := testdb.Postgres(t)
	path, byState := copySource(t)
	src := openSource(t, path)
	ctx := context.Background()
	rep, err := mqlite.Copy(ctx, path, to, mqlite.CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.AlreadyCopied {
		t.Fatal("the first copy says already copied")
	}
	for state, n := range byState {
		if rep.ByState[state] != n {
			t.Errorf("report: %d %s messages, want %d (%v)", rep.ByState[state], state, n, rep.ByState)
		}
	}
	for _, c := range copyChecks {
		want, got := tableRows(t, src, c.sqlite), tableRows(t, pg, c.postgres)
		if len(want) == 0 {
			t.Errorf("%s: the source has no row: the test checks nothing there", c.table)
		}
		if !slices.Equal(want, got) {
			t.Errorf("%s differs:\nsource: %q\ntarget: %q", c.table, want, got)
		}
	}
	// Counts per state, leases and delivery counts on the target itself.
	states := tableRows(t, pg, `SELECT state, count(*), sum(delivery_count), count(*) FILTER (WHERE locked_until > 0)
		FROM mqlite_messages GROUP BY state`)
	t.Logf("target by state (state|count|deliveries|leases): %q", states)
	for _, want := range []string{"locked|2|2|2", "dead_lettered|1|1|0", "deferred|1|1|0", "completed|1|1|0"} {
		if !slices.Contains(states, want) {
			t.Errorf("target by state: no %q in %q", want, states)
		}
	}
	var bodies int
	if err := src.QueryRow(`SELECT count(*) FROM mqlite_message_bodies`).Scan(&bodies); err != nil || bodies < 2 {
		t.Fatalf("the source keeps %d bodies out of their rows (%v): the test checks no joined body", bodies, err)
	}
	// The next send gets an id past every id the source gave, the purged
	// newest one included.
	var maxID, floor, last int64
	if err := src.QueryRow(`SELECT (SELECT max(id) FROM mqlite_messages), (SELECT floor FROM mqlite_sequence)`).Scan(&maxID, &floor); err != nil {
		t.Fatal(err)
	}
	if err := pg.QueryRow(`SELECT last_value FROM mqlite_messages_id_seq`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if floor <= maxID || last != floor || rep.NextMessageID != floor+1 {
		t.Errorf("sequence: source max id %d, floor %d; target's last value %d, report's next %d", maxID, floor, last, rep.NextMessageID)
	}
	if state, err := schema.CheckPostgres(ctx, pg); err != nil || state != schema.Current {
		t.Errorf("the target's layout: %v, %v", state, err)
	}
	// Every queue's and topic's name is in the namespace both share, so
	// that a creation on the target meets it.
	names := tableRows(t, pg, `SELECT name, kind FROM mqlite_names ORDER BY 1, 2`)
	if want := tableRows(t, pg, `SELECT name, 'queue' FROM mqlite_queues UNION ALL SELECT name, 'topic' FROM mqlite_topics ORDER BY 1, 2`); len(names) == 0 || !slices.Equal(names, want) {
		t.Errorf("mqlite_names: %q, want %q", names, want)
	}

	// The retry: already copied, the same report, nothing written.
	before := targetSnapshot(t, pg)
	again, err := mqlite.Copy(ctx, path, to, mqlite.CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !again.AlreadyCopied || again.Digest != rep.Digest || again.Messages != rep.Messages || again.CopiedAt != rep.CopiedAt {
		t.Errorf("retry: %+v\nfirst: %+v", again, rep)
	}
	if after := targetSnapshot(t, pg); after != before {
		t.Errorf("the retry changed the target:\nbefore %s\nafter %s", before, after)
	}

	// The source changed since: the target holds a copy of another store.
	tb := testdb.OpenPath(t, path, mqlite.Config{})
	tb.Send(t, "orders", outbox.Message{Body: []byte("after the copy")})
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = mqlite.Copy(ctx, path, to, mqlite.CopyOptions{})
	if !errors.Is(err, mqlite.ErrTargetNotEmpty) {
		t.Fatalf("copy of a changed source: %v, want ErrTargetNotEmpty", err)
	}
	t.Logf("a changed source: %v", err)
	if after := targetSnapshot(t, pg); after != before {
		t.Errorf("the refused copy changed the target")
	}
}

// TestCopyRefusesANonEmptyTarget: a database that holds a store's rows
// (here one queue) is refused, and nothing is written into it.
func TestCopyRefusesANonEmptyTarget(t *testing.T) {
	to, pg := testdb.Postgres(t)
	ctx := context.Background()
	if err := schema.ApplyPostgres(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Exec(`INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms,
		default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, created_at, updated_at, dedup_by_body)
		VALUES ('theirs', 'standard', 10, 30000, 0, 0, false, 0, 0, 0, 1, 1, false)`); err != nil {
		t.Fatal(err)
	}
	before := targetSnapshot(t, pg)
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "orders", mqlite.QueueOptions{})
	tb.Send(t, "orders", outbox.Message{Body: []byte("x")})
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := mqlite.Copy(ctx, tb.Path, to, mqlite.CopyOptions{})
	if !errors.Is(err, mqlite.ErrTargetNotEmpty) {
		t.Fatalf("copy into a target with a queue: %v, want ErrTargetNotEmpty", err)
	}
	t.Logf("refused: %v", err)
	if after := targetSnapshot(t, pg); after != before {
		t.Errorf("the refused copy changed the target:\nbefore %s\nafter %s", before, after)
	}
}

// TestCopyFailureLeavesTheTargetEmpty cancels a copy in the middle of the
// messages, after a batch of them went into the target inside the copy's
// transaction: the target is left without a row, and a second run copies
// everything (the control: the same copy, not cancelled, succeeds).
func TestCopyFailureLeavesTheTargetEmpty(t *testing.T) {
	to, pg := testdb.Postgres(t)
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "orders", mqlite.QueueOptions{})
	const total = 1200 // more than two batches
	msgs := make([]outbox.Message, total)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "message %d", i), MessageID: fmt.Sprint("m-", i)}
	}
	tb.Send(t, "orders", msgs...)
	if err := tb.Store.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cut, visible int64 = -1, -1
	_, err := mqlite.Copy(ctx, tb.Path, to, mqlite.CopyOptions{Progress: func(table string, rows int64) {
		if table != "mqlite_messages" || cut >= 0 {
			return
		}
		cut = rows
		// What another connection sees of the batches written so far.
		if err := pg.QueryRow(`SELECT count(*) FROM mqlite_messages`).Scan(&visible); err != nil {
			t.Error(err)
		}
		cancel()
	}})
	if err == nil || cut <= 0 || cut >= total {
		t.Fatalf("cancelled copy: %v, cut after %d of %d messages", err, cut, total)
	}
	t.Logf("cancelled after %d of %d messages written in the copy's transaction (%d visible outside it): %v", cut, total, visible, err)
	if visible != 0 {
		t.Errorf("the copy's rows were visible before its commit: %d", visible)
	}
	for _, table := range []string{"mqlite_queues", "mqlite_messages", "mqlite_dedup", "mqlite_copies"} {
		var n int
		if err := pg.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s after the failed copy: %d rows, %v", table, n, err)
		}
	}
	rep, err := mqlite.Copy(context.Background(), tb.Path, to, mqlite.CopyOptions{})
	if err != nil || rep.AlreadyCopied || rep.Messages != total || rep.DedupEntries != total {
		t.Fatalf("the copy after the failure: %+v, %v", rep, err)
	}
}

// TestCopyArguments: the source must be a store file that no store holds,
// the target a PostgreSQL URL; each refusal says so and opens nothing.
func TestCopyArguments(t *testing.T) {
	ctx := context.Background()
	const to = "postgres://nobody@127.0.0.1:1/none"
	tb := testdb.Open(t, mqlite.Config{})
	if _, err := mqlite.Copy(ctx, tb.Path, to, mqlite.CopyOptions{}); !errors.Is(err, mqlite.ErrDBLocked) {
		t.Errorf("copy of a file a store holds: %v, want ErrDBLocked", err)
	}
	missing := filepath.Join(t.TempDir(), "none.db")
	if _, err := mqlite.Copy(ctx, missing, to, mqlite.CopyOptions{}); !errors.Is(err, mqlite.ErrNoStore) {
		t.Errorf("copy of a missing file: %v, want ErrNoStore", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused copy made %s: %v", missing, err)
	}
	for _, c := range [][2]string{{tb.Path, "other.db"}, {to, to}, {"", to}} {
		if _, err := mqlite.Copy(ctx, c[0], c[1], mqlite.CopyOptions{}); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("copy %q to %q: %v, want ErrInvalidArgument", c[0], c[1], err)
		}
	}
}

// TestCopiesAtOnce: two files copied into one database at the same time:
// one copy commits, the other waits for it and is then refused, so the
// database holds exactly one store.
func TestCopiesAtOnce(t *testing.T) {
	to, pg := testdb.Postgres(t)
	paths := make([]string, 2)
	for i := range paths {
		tb := testdb.Open(t, mqlite.Config{})
		tb.Queue(t, fmt.Sprint("q", i), mqlite.QueueOptions{})
		tb.Send(t, fmt.Sprint("q", i), outbox.Message{Body: []byte("x")})
		if err := tb.Store.Close(); err != nil {
			t.Fatal(err)
		}
		paths[i] = tb.Path
	}
	errs := make(chan error, len(paths))
	for _, p := range paths {
		go func() {
			_, err := mqlite.Copy(context.Background(), p, to, mqlite.CopyOptions{})
			errs <- err
		}()
	}
	var ok, refused int
	for range paths {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, mqlite.ErrTargetNotEmpty):
			refused++
		default:
			t.Errorf("copy: %v", err)
		}
	}
	var queues int
	if err := pg.QueryRow(`SELECT count(*) FROM mqlite_queues`).Scan(&queues); err != nil {
		t.Fatal(err)
	}
	if ok != 1 || refused != 1 || queues != 1 {
		t.Errorf("%d copies committed, %d refused; the database holds %d queues; want 1, 1, 1", ok, refused, queues)
	}
}
