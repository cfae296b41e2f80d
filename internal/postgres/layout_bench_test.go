package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver of database/sql

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/schema"
)

// BenchmarkLayoutForms measures what a statement of the message path costs
// on the server in today's layout (schema/postgres.sql, this package's
// statements), in the hand-written queue of bench/postgres (raw), and in
// candidate forms of a leaner layout, in one run: each form on a fresh
// schema of its own per run, one connection, autocommit but for the sends
// (BEGIN, the send, COMMIT, as the engine's plain path), synchronous_commit
// off. The four steps (send one, send 100, claim one + complete, claim 100
// + complete 100) run one after another, each across all forms in an order
// that rotates, so that the machine's load falls on every form alike.
// Within a run each figure is a median over the step's statements, which
// keeps out the moments another process held the CPU: a statement's time
// (wall time on the one connection: the round trip is in it, the same for
// every form; the "SELECT 1" line shows it), and msgs/s as the messages of
// one iteration (a send's transaction, a claim and its completion) over
// its median time. It logs the median over the runs of each, msgs/s's
// ratio to raw's median, and the median of the runs' own ratios.
//
// It runs its whole matrix once whatever b.N:
//
//	go test -run '^$' -bench BenchmarkLayoutForms -benchtime 1x ./internal/postgres
//
// MQLITE_LAYOUT_RUNS sets the runs (9), MQLITE_LAYOUT_FORMS a
// comma-separated list of form names (all).
func BenchmarkLayoutForms(b *testing.B) {
	runs := 9
	if s := os.Getenv("MQLITE_LAYOUT_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("MQLITE_LAYOUT_RUNS=%q", s)
		}
		runs = n
	}
	forms := layoutForms()
	if s := os.Getenv("MQLITE_LAYOUT_FORMS"); s != "" {
		keep := strings.Split(s, ",")
		forms = slices.DeleteFunc(forms, func(f layoutForm) bool { return f.name != "raw" && !slices.Contains(keep, f.name) })
	}
	ctx := context.Background()
	b.Logf("load average at start: %s", loadAverage())
	// results[step][form] holds a value a run for each figure.
	type figures struct {
		ms   [2][]float64
		rate []float64
	}
	results := make([][]figures, len(layoutSteps))
	for i := range results {
		results[i] = make([]figures, len(forms))
	}
	var rtt []float64
	for run := range runs {
		dbs := make([]*sql.DB, len(forms))
		for i, f := range forms {
			dbs[i] = openForm(b, ctx, f)
		}
		rtt = append(rtt, pingMS(b, ctx, dbs[0]))
		for s, step := range layoutSteps {
			for k := range forms {
				i := (k + run + s) % len(forms)
				ms, rate := step.run(b, ctx, dbs[i], forms[i])
				r := &results[s][i]
				r.ms[0], r.ms[1], r.rate = append(r.ms[0], ms[0]), append(r.ms[1], ms[1]), append(r.rate, rate)
			}
		}
		for _, db := range dbs {
			_ = db.Close()
		}
		b.Logf("run %d of %d done, load average %s", run+1, runs, loadAverage())
	}
	rawAt := slices.IndexFunc(forms, func(f layoutForm) bool { return f.name == "raw" })
	var out strings.Builder
	fmt.Fprintf(&out, "\nmedians of %d runs; SELECT 1 round trip %.3f ms\n", runs, median(rtt))
	fmt.Fprintf(&out, "| step | form | statement ms | second statement ms | msgs/s | / raw | / raw, median of the runs' |\n|---|---|--:|--:|--:|--:|--:|\n")
	for s, step := range layoutSteps {
		raw := median(results[s][rawAt].rate)
		for i, f := range forms {
			r := results[s][i]
			second := "—"
			if step.two {
				second = fmt.Sprintf("%.3f", median(r.ms[1]))
			}
			rate := median(r.rate)
			ratios := make([]float64, len(r.rate))
			for k := range ratios {
				ratios[k] = r.rate[k] / results[s][rawAt].rate[k]
			}
			fmt.Fprintf(&out, "| %s | %s | %.3f | %s | %.0f | %.2fx | %.2fx |\n", step.name, f.name, median(r.ms[0]), second, rate,
				rate/raw, median(ratios))
		}
	}
	b.Log(out.String())
	b.Logf("load average at end: %s", loadAverage())
}

// layoutForm is a layout and the statements of the message path on it.
type layoutForm struct {
	name string
	raw  bool     // bench/postgres's hand-written queue, not mqlite's layout
	ddl  []string // run after the layout
	// The statements, with this package's arguments: sendOne as
	// plainOneSQL, sendMany as plainManySQL, claim as claimSQLs (no
	// budget, peek-lock), complete as settleSQL[OpComplete], completeMany
	// as completeManySQL. Empty: today's.
	sendOne, sendMany, claim, complete, completeMany string
}

// layoutQueue is the queue every mqlite form sends to.
const layoutQueue = "bench"

// rawLayout is bench/postgres's hand-written queue (peers.go), word for word.
var rawLayout = []string{
	`CREATE TABLE raw_messages (
		id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue       text   NOT NULL,
		body        bytea  NOT NULL,
		state       text   NOT NULL DEFAULT 'ready',
		locked_until bigint NOT NULL DEFAULT 0,
		enqueued_at bigint NOT NULL
	)`,
	`CREATE INDEX raw_ready ON raw_messages (queue, id) WHERE state = 'ready'`,
	`CREATE FUNCTION raw_notify() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_notify('raw_claimable', 'bench');
		RETURN NULL;
	END
	$$`,
	`CREATE TRIGGER raw_notify AFTER INSERT ON raw_messages FOR EACH STATEMENT EXECUTE FUNCTION raw_notify()`,
}

// The pieces of the candidate forms.
var (
	// noFK drops the messages' foreign key to their queue: a row-level
	// check (a lookup in mqlite_queues) for every row inserted.
	noFK = []string{`ALTER TABLE mqlite_messages DROP CONSTRAINT mqlite_messages_queue_fkey`}
	// fewIndexes keeps, of the message indexes, only those the hot path
	// writes to or reads (the primary key, active, locked, scheduled): the bound of
	// what fewer partial indexes could save.
	// (mqlite_msg_scheduled stays: without it the claim's due probe is a
	// sequential scan, 1.4 ms a claim in a first run.)
	fewIndexes = []string{`DROP INDEX mqlite_msg_scheduled_id, mqlite_msg_dead, mqlite_msg_deferred,
		mqlite_msg_ttl, mqlite_msg_settled, mqlite_msg_group_live, mqlite_msg_group_flight`}
	// noTriggers drops both notify triggers.
	noTriggers = []string{`DROP TRIGGER mqlite_notify_insert ON mqlite_messages`, `DROP TRIGGER mqlite_notify_update ON mqlite_messages`}
	// rowUpdateTrigger makes the update trigger a row trigger whose WHEN
	// passes only a row that becomes claimable or scheduled: a claim or a
	// completion calls no function and keeps no transition table.
	rowUpdateTrigger = []string{`DROP TRIGGER mqlite_notify_update ON mqlite_messages`,
		`CREATE FUNCTION mqlite_notify_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_notify('mqlite_claimable', NEW.queue);
			RETURN NULL;
		END
		$$`,
		`CREATE TRIGGER mqlite_notify_update AFTER UPDATE ON mqlite_messages FOR EACH ROW
			WHEN (NEW.state IN ('active', 'scheduled')) EXECUTE FUNCTION mqlite_notify_row()`}
	// completions is the table of form (a): a completed message leaves
	// mqlite_messages, and its receipt is a narrow row here.
	completions = []string{`CREATE TABLE mqlite_completions (
			seq        bigint PRIMARY KEY,
			queue      text   NOT NULL,
			lock_token text   NOT NULL,
			settled_at bigint NOT NULL)`,
		`CREATE INDEX mqlite_completions_settled ON mqlite_completions (settled_at)`}
	// fillfactor leaves room on each page for an updated row's new version.
	fillfactor = []string{`ALTER TABLE mqlite_messages SET (fillfactor = 80)`}
)

// completeDeleteSQL is form (a)'s completion: the fenced row deleted and
// its receipt written, one statement.
const completeDeleteSQL = `WITH d AS (DELETE FROM mqlite_messages WHERE ` + fence + ` RETURNING id, queue, lock_token, body_len),
r AS (INSERT INTO mqlite_completions (seq, queue, lock_token, settled_at) SELECT id, queue, lock_token, $4 FROM d)
SELECT 'completed', body_len FROM d`

// completeManyDeleteSQL is completeManySQL in form (a).
var completeManyDeleteSQL = `WITH l AS (
	SELECT m.id FROM unnest($2::bigint[], $3::text[], $4::text[]) AS l(seq, queue, token)
	  JOIN mqlite_messages m ON m.id = l.seq
	 WHERE m.queue = l.queue AND m.lock_token = l.token AND m.state = 'locked' AND m.locked_until > $1
	 ORDER BY m.id
	 FOR UPDATE OF m),
d AS (DELETE FROM mqlite_messages WHERE id IN (SELECT id FROM l) RETURNING id, queue, lock_token, body_len),
r AS (INSERT INTO mqlite_completions (seq, queue, lock_token, settled_at) SELECT id, queue, lock_token, $1 FROM d)
SELECT id, queue, body_len FROM d`

// notifyInline is the condition a send statement's answer carries so that
// the statement notifies the waiting Receives itself (no insert trigger):
// once, when a row it inserted (m) is claimable or scheduled.
const notifyInline = `(SELECT count(pg_notify('mqlite_claimable', $1)) FROM
	(SELECT 1 FROM m WHERE state IN ('active', 'scheduled') LIMIT 1) x) >= 0`

// sendOneInlineSQL is plainOneSQL notifying itself.
var sendOneInlineSQL = `WITH m AS (` + plainOneSQL + `) SELECT id, state, body_len FROM m WHERE ` + notifyInline

// sendManyInlineSQL is plainManySQL notifying itself.
var sendManyInlineSQL = strings.Replace(plainManySQL, `SELECT m.id, m.state, m.body_len FROM m JOIN s ON s.id = m.id ORDER BY s.n`,
	`SELECT m.id, m.state, m.body_len FROM m JOIN s ON s.id = m.id WHERE `+notifyInline+` ORDER BY s.n`, 1)

// claimRawShapeSQL is the raw side's claim on today's table: today's
// columns written and returned, without the settings CTE, the group rule,
// the TTL, the delivery limit and the due probe (form e: what the
// statement's shape costs beside the table).
const claimRawShapeSQL = `UPDATE mqlite_messages SET state = 'locked', locked_until = $2::bigint + 30000,
	lock_token = ` + newTokenSQL + `, delivery_count = delivery_count + 1
	WHERE id IN (SELECT id FROM mqlite_messages WHERE queue = $1 AND state = 'active'
		ORDER BY priority DESC, id LIMIT $3 FOR UPDATE SKIP LOCKED)
	RETURNING ` + rowColumns

// claimSlimSQL is claimRawShapeSQL returning only what a consumer needs
// to settle and handle (id, token, body), as the raw claim returns two
// columns.
var claimSlimSQL = strings.Replace(claimRawShapeSQL, `RETURNING `+rowColumns, `RETURNING id, state, delivery_count, enqueued_at, expires_at, visible_at, '',
	NULL::text, '', '', body, lock_token, locked_until, '', '', 0::bigint, '', priority, NULL::text`, 1)

// claimNoTokenSQL is claimSlimSQL drawing no token (the row keeps its
// own): what gen_random_uuid costs a row.
var claimNoTokenSQL = strings.Replace(claimSlimSQL, `lock_token = `+newTokenSQL+`,`, ``, 1)

// completeManyJoinSQL is completeManySQL without its locking CTE: the
// update joins the arrays itself, so each row is written once, not locked
// first (FOR UPDATE) and written after. (It gives up the id order of the
// locks, which keeps two calls over shared deliveries from deadlocking.)
var completeManyJoinSQL = `UPDATE mqlite_messages m SET ` + settledSet("$1") + `
  FROM unnest($2::bigint[], $3::text[], $4::text[]) AS l(seq, queue, token)
 WHERE m.id = l.seq AND m.queue = l.queue AND m.lock_token = l.token AND m.state = 'locked' AND m.locked_until > $1
RETURNING m.id, m.queue, m.body_len`

// completionsPKOnly is completions without the index on settled_at: the
// janitor would find expired receipts by a scan of the narrow table.
var completionsPKOnly = completions[:1]

// completeManyDeleteJoinSQL is completeManyDeleteSQL without its locking
// CTE (as completeManyJoinSQL).
const completeManyDeleteJoinSQL = `WITH d AS (DELETE FROM mqlite_messages m
  USING unnest($2::bigint[], $3::text[], $4::text[]) AS l(seq, queue, token)
 WHERE m.id = l.seq AND m.queue = l.queue AND m.lock_token = l.token AND m.state = 'locked' AND m.locked_until > $1
 RETURNING m.id, m.queue, m.lock_token, m.body_len),
r AS (INSERT INTO mqlite_completions (seq, queue, lock_token, settled_at) SELECT id, queue, lock_token, $1 FROM d)
SELECT id, queue, body_len FROM d`

// noLockedIndex drops the index of the locked messages (the sweep of
// lapsed leases and the claim's due probe read it): what a claim's entry
// in it costs.
var noLockedIndex = []string{`DROP INDEX mqlite_msg_locked`}

// layoutForms are the forms measured, today's and raw first.
func layoutForms() []layoutForm {
	join := func(parts ...[]string) []string { return slices.Concat(parts...) }
	lean2 := join(completionsPKOnly, noFK, noTriggers, rowUpdateTrigger[1:])
	return []layoutForm{
		{name: "today"},
		{name: "raw", raw: true},
		{name: "a-completions", ddl: completions, complete: completeDeleteSQL, completeMany: completeManyDeleteSQL},
		{name: "b-noFK", ddl: noFK},
		{name: "b-fewidx", ddl: fewIndexes},
		{name: "c-notrig", ddl: noTriggers},
		{name: "c-rowupd", ddl: rowUpdateTrigger},
		{name: "c-inline", ddl: join(noTriggers, rowUpdateTrigger[1:]), sendOne: sendOneInlineSQL, sendMany: sendManyInlineSQL},
		{name: "d-ff80", ddl: fillfactor},
		{name: "e-rawclaim", claim: claimRawShapeSQL},
		{name: "e-claim-3col", claim: claimSlimSQL},
		{name: "e-claim-notoken", claim: claimNoTokenSQL},
		{name: "e-complete-join", completeMany: completeManyJoinSQL},
		{name: "a-pkonly", ddl: completionsPKOnly, complete: completeDeleteSQL, completeMany: completeManyDeleteSQL},
		{name: "e-claim-3col-nolockedidx", ddl: noLockedIndex, claim: claimSlimSQL},
		{name: "lean2", ddl: lean2, sendOne: sendOneInlineSQL, sendMany: sendManyInlineSQL,
			complete: completeDeleteSQL, completeMany: completeManyDeleteJoinSQL},
		{name: "lean2+claim-3col", ddl: lean2, sendOne: sendOneInlineSQL, sendMany: sendManyInlineSQL, claim: claimSlimSQL,
			complete: completeDeleteSQL, completeMany: completeManyDeleteJoinSQL},
	}
}

// openForm gives f a fresh schema of its own with its layout and queue,
// and a handle of one connection on it.
func openForm(b *testing.B, ctx context.Context, f layoutForm) *sql.DB {
	b.Helper()
	db, err := sql.Open("pgx", pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ddl := rawLayout
	if !f.raw {
		if err := schema.ApplyPostgres(ctx, db); err != nil {
			b.Fatal(err)
		}
		ddl = append(slices.Clone(f.ddl), `INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms,
			dedup_window_ms, default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes,
			dedup_by_body, created_at, updated_at) VALUES ('`+layoutQueue+`', 'standard', 10, 30000, 0, 0, false, 0, 0, 0, false, 0, 0)`)
	}
	for _, s := range ddl {
		if _, err := db.ExecContext(ctx, s); err != nil {
			b.Fatalf("%s: %v\n%s", f.name, err, s)
		}
	}
	return db
}

// layoutStep is one row of the matrix: run does it once on a form and
// answers the median time of its statement (and of its second statement,
// when two) and the messages a second of its median iteration.
type layoutStep struct {
	name string
	two  bool
	run  func(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm) (ms [2]float64, rate float64)
}

// The sizes of the steps: the sends leave exactly what the claims take.
const (
	stepOnes    = 400 // send one, claim one + complete
	stepBatches = 40  // send 100, claim 100 + complete 100
	stepBatch   = 100
)

var layoutSteps = []layoutStep{
	{name: "send one", run: func(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm) ([2]float64, float64) {
		return layoutSend(b, ctx, db, f, stepOnes, 1)
	}},
	{name: "send 100", run: func(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm) ([2]float64, float64) {
		return layoutSend(b, ctx, db, f, stepBatches, stepBatch)
	}},
	{name: "claim one + complete", two: true, run: func(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm) ([2]float64, float64) {
		return layoutDrain(b, ctx, db, f, stepOnes, 1)
	}},
	{name: "claim 100 + complete 100", two: true, run: func(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm) ([2]float64, float64) {
		return layoutDrain(b, ctx, db, f, stepBatches, stepBatch)
	}},
}

// layoutBody is every message's body: 256 printable bytes, as
// bench/postgres sends.
var layoutBody = []byte(strings.Repeat("mqlite-b", 32))

// layoutSend sends n transactions of batch messages: BEGIN, the send
// statement, COMMIT. The statement's time is the send statement's alone.
func layoutSend(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm, n, batch int) ([2]float64, float64) {
	b.Helper()
	inStatement, iteration := make([]float64, 0, n), make([]float64, 0, n)
	for range n {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now().UnixMilli()
		t0 := time.Now()
		got := 0
		switch {
		case f.raw && batch == 1:
			_, err = tx.ExecContext(ctx, `INSERT INTO raw_messages (queue, body, enqueued_at) VALUES ($1, $2, $3)`, layoutQueue, layoutBody, now)
			got = 1
		case f.raw:
			bodies := make([][]byte, batch)
			for i := range bodies {
				bodies[i] = layoutBody
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO raw_messages (queue, body, enqueued_at)
				SELECT $1, b, $3 FROM unnest($2::bytea[]) AS b`, layoutQueue, bodies, now)
			got = batch
		case batch == 1:
			got, err = countRows(tx.QueryContext(ctx, or(f.sendOne, plainOneSQL), layoutQueue, now, "", "", layoutBody, int64(0), int64(0), int16(0)))
		default:
			subjs, props, bodies := make([]string, batch), make([]string, batch), make([][]byte, batch)
			ats, ttls, pris := make([]int64, batch), make([]int64, batch), make([]int16, batch)
			for i := range bodies {
				bodies[i] = layoutBody
			}
			got, err = countRows(tx.QueryContext(ctx, or(f.sendMany, plainManySQL), layoutQueue, now, subjs, props, bodies, ats, ttls, pris))
		}
		inStatement = append(inStatement, msSince(t0))
		if err != nil {
			b.Fatalf("%s: send: %v", f.name, err)
		}
		if got != batch {
			b.Fatalf("%s: send: %d rows of %d", f.name, got, batch)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		iteration = append(iteration, msSince(start))
	}
	return [2]float64{median(inStatement), 0}, float64(batch) * 1000 / median(iteration)
}

// layoutDrain claims batch messages n times, each claim followed by the
// completion of what it claimed (Complete for one, CompleteMany for
// more), every statement its own transaction.
func layoutDrain(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm, n, batch int) ([2]float64, float64) {
	b.Helper()
	inClaim, inComplete, iteration := make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
	for range n {
		now := time.Now().UnixMilli()
		t0 := time.Now()
		seqs, tokens := layoutClaim(b, ctx, db, f, now, batch)
		t1 := time.Now()
		inClaim = append(inClaim, msSince(t0))
		if len(seqs) != batch {
			b.Fatalf("%s: claimed %d of %d", f.name, len(seqs), batch)
		}
		var done int
		var err error
		switch {
		case f.raw:
			var res sql.Result
			res, err = db.ExecContext(ctx, `DELETE FROM raw_messages WHERE id = ANY($1) AND state = 'locked'`, seqs)
			if err == nil {
				var d int64
				d, err = res.RowsAffected()
				done = int(d)
			}
		case batch == 1:
			var state string
			var bytes int64
			err = db.QueryRowContext(ctx, or(f.complete, settleSQL[driver.OpComplete]), seqs[0], layoutQueue, tokens[0], now).Scan(&state, &bytes)
			done = 1
		default:
			queues := make([]string, batch)
			for i := range queues {
				queues[i] = layoutQueue
			}
			done, err = countRows(db.QueryContext(ctx, or(f.completeMany, completeManySQL), now, seqs, queues, tokens))
		}
		inComplete = append(inComplete, msSince(t1))
		iteration = append(iteration, msSince(t0))
		if err != nil {
			b.Fatalf("%s: complete: %v", f.name, err)
		}
		if done != batch {
			b.Fatalf("%s: completed %d of %d", f.name, done, batch)
		}
	}
	return [2]float64{median(inClaim), median(inComplete)}, float64(batch) * 1000 / median(iteration)
}

// layoutClaim claims up to max messages with f's claim and answers their
// seqs and tokens.
func layoutClaim(b *testing.B, ctx context.Context, db *sql.DB, f layoutForm, now int64, max int) (seqs []int64, tokens []string) {
	b.Helper()
	if f.raw {
		rows, err := db.QueryContext(ctx, `UPDATE raw_messages SET state = 'locked', locked_until = $3
			WHERE id IN (SELECT id FROM raw_messages WHERE queue = $1 AND state = 'ready'
				ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING id, body`, layoutQueue, max, now+30_000)
		if err != nil {
			b.Fatalf("raw: claim: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var body []byte
			if err := rows.Scan(&id, &body); err != nil {
				b.Fatal(err)
			}
			seqs = append(seqs, id)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		return seqs, nil
	}
	rows, err := db.QueryContext(ctx, or(f.claim, claimSQLs[0][0]), layoutQueue, now, max)
	if err != nil {
		b.Fatalf("%s: claim: %v", f.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanRow(rows)
		if err != nil {
			b.Fatal(err)
		}
		if c.Seq != 0 { // not claimSQL's dueMarker
			seqs, tokens = append(seqs, c.Seq), append(tokens, c.LockToken)
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatalf("%s: claim: %v", f.name, err)
	}
	return seqs, tokens
}

// countRows reads and counts the rows of a query.
func countRows(rows *sql.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// pingMS is the mean time of a SELECT 1 on db: the round trip every
// statement's time includes.
func pingMS(b *testing.B, ctx context.Context, db *sql.DB) float64 {
	b.Helper()
	const n = 200
	start := time.Now()
	for range n {
		var one int
		if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
			b.Fatal(err)
		}
	}
	return msOf(time.Since(start), n)
}

func msOf(d time.Duration, n int) float64 { return d.Seconds() * 1000 / float64(n) }

// msSince is the milliseconds since t.
func msSince(t time.Time) float64 { return time.Since(t).Seconds() * 1000 }

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// median is the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadAverage is the machine's load averages (1, 5, 15 minutes).
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
