package schema

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"strconv"
	"strings"

	"github.com/mqlite/mqlite/internal/errs"
)

// CopyReport is what CopyToPostgres copied: the rows of each table, the
// messages by state, and the digest that names the source's contents.
type CopyReport struct {
	Queues        int64 `json:"queues"`
	Topics        int64 `json:"topics"`
	Subscriptions int64 `json:"subscriptions"`
	// Messages counts every message row, completed ones (the receipts of
	// their completions) included; ByState splits them by state.
	Messages int64            `json:"messages"`
	ByState  map[string]int64 `json:"by_state"`
	// BodyBytes adds up the bodies copied.
	BodyBytes          int64 `json:"body_bytes"`
	DedupEntries       int64 `json:"dedup_entries"`
	SettlementReceipts int64 `json:"settlement_receipts"`
	ReceiveAttempts    int64 `json:"receive_attempts"`
	CommitRecords      int64 `json:"commit_records"`
	AccessKeys         int64 `json:"access_keys"`
	Schedules          int64 `json:"schedules"`
	// NextMessageID is the id the target's next send gets: one past the
	// highest id the source ever gave.
	NextMessageID int64 `json:"next_message_id"`
	// Digest is the SHA-256, in hex, of everything the copy read: the
	// source's identity in mqlite_copies.
	Digest string `json:"digest"`
	// CopiedAt is when the copy committed (CopyOptions.Now of the run
	// that made it), in epoch milliseconds.
	CopiedAt int64 `json:"copied_at"`
	// AlreadyCopied says the target held this very copy already (a retry
	// after a success, or after a failure that had committed): nothing
	// was written, and the counts are those of the run that copied.
	AlreadyCopied bool `json:"already_copied"`
}

// CopyOptions tunes CopyToPostgres.
type CopyOptions struct {
	// Source names the source in mqlite_copies (its path), for people.
	Source string
	// Now is the moment the copy is recorded at, in epoch milliseconds.
	Now int64
	// Progress, when set, is called after each batch of rows written,
	// with the table and how many of its rows are written so far (inside
	// the transaction: nothing is visible before the commit).
	Progress func(table string, rows int64)
}

// copyBatchRows and copyBatchBytes bound one multi-row insert: its rows,
// and the bytes of its values, so that a copy holds one batch of bodies in
// memory at a time whatever the store's size.
const (
	copyBatchRows  = 500
	copyBatchBytes = 4 << 20
	maxParams      = 65535 // PostgreSQL's bound on a statement's parameters
)

// copyTables are the data tables of the PostgreSQL layout: a target that
// has a row in any of them is not empty.
var copyTables = []string{"mqlite_queues", "mqlite_topics", "mqlite_subscriptions", "mqlite_messages",
	"mqlite_dedup", "mqlite_settlement_receipts", "mqlite_receive_attempts", "mqlite_commits",
	"mqlite_access_keys", "mqlite_schedules", "mqlite_names", "mqlite_copies"}

// CopyToPostgres copies the store of src, a SQLite file of this binary's
// layout, into dst, a PostgreSQL database: the queues with their
// settings, the messages in every state with their leases, delivery
// counts and bodies (a body kept out of its row joins it), the dedup
// entries (a content key becomes kind 'body' with its hex), the settlement
// receipts, receive attempts and commit records (so that the retries of
// the requests the source answered are answered alike), the topics and
// their subscriptions (each name in mqlite_names, the namespace queues and
// topics share), the schedules and the access keys. The target's
// sequences are then set past the highest ids the source gave, so that no
// send on the target reuses one.
//
// src is read in one read transaction (a consistent snapshot) and never
// written. dst gets the PostgreSQL layout when it has none; the copy is one
// transaction on it, so that a failure, a cancelled ctx or a killed
// process leaves it as it was. The copy records itself in mqlite_copies
// in that transaction, under the digest of what it read. A target that
// already holds a queue, a message, a topic, a schedule, an access key or
// any other row is refused (errs.ErrTargetNotEmpty, nothing written),
// except when it holds this very copy: a retry, after a success or after
// a failure that left the commit's fate unknown, then answers the first
// run's report with AlreadyCopied set. Two copies into one database at
// once run one after the other.
func CopyToPostgres(ctx context.Context, src, dst *sql.DB, opts CopyOptions) (CopyReport, error) {
	switch state, err := Check(ctx, src); {
	case err != nil:
		return CopyReport{}, fmt.Errorf("the source: %w", err)
	case state == Fresh:
		return CopyReport{}, fmt.Errorf("%w: the source file holds no mqlite store", errs.ErrNoStore)
	case state == Outdated:
		return CopyReport{}, fmt.Errorf("%w: the source's layout is older than this binary's (%s): migrate it first",
			errs.ErrMigrationNeeded, Token)
	}
	state, err := CheckPostgres(ctx, dst)
	if err != nil {
		return CopyReport{}, fmt.Errorf("the target: %w", err)
	}
	if state != Current {
		if err := ApplyPostgres(ctx, dst); err != nil {
			return CopyReport{}, fmt.Errorf("the target: %w", err)
		}
	}
	read, err := src.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return CopyReport{}, fmt.Errorf("read the source: %w", err)
	}
	defer func() { _ = read.Rollback() }()
	write, err := dst.BeginTx(ctx, nil)
	if err != nil {
		return CopyReport{}, fmt.Errorf("write the target: %w", err)
	}
	defer func() { _ = write.Rollback() }()
	// Copies into one database queue here: the second finds the first's
	// rows once it commits, and answers from them.
	if _, err := write.ExecContext(ctx, `LOCK TABLE mqlite_copies IN EXCLUSIVE MODE`); err != nil {
		return CopyReport{}, fmt.Errorf("lock the target: %w", err)
	}
	held, err := firstHeld(ctx, write)
	if err != nil {
		return CopyReport{}, fmt.Errorf("look at the target: %w", err)
	}
	if held != "" {
		return copiedBefore(ctx, read, write, held)
	}
	c := &copier{read: read, write: write, digest: sha256.New(), progress: opts.Progress}
	rep, err := c.run(ctx)
	if err != nil {
		return CopyReport{}, err
	}
	rep.CopiedAt = opts.Now
	text, err := json.Marshal(rep)
	if err != nil {
		return CopyReport{}, err
	}
	if _, err := write.ExecContext(ctx, `INSERT INTO mqlite_copies (digest, source, copied_at, report) VALUES ($1, $2, $3, $4)`,
		rep.Digest, opts.Source, opts.Now, string(text)); err != nil {
		return CopyReport{}, fmt.Errorf("record the copy: %w", err)
	}
	if err := write.Commit(); err != nil {
		return CopyReport{}, fmt.Errorf("commit: %w", err)
	}
	return rep, nil
}

// firstHeld returns the first data table of the target that has a row; ""
// when none has.
func firstHeld(ctx context.Context, tx *sql.Tx) (string, error) {
	for _, t := range copyTables {
		var found bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+t+`)`).Scan(&found); err != nil {
			return "", err
		}
		if found {
			return t, nil
		}
	}
	return "", nil
}

// copiedBefore answers a target that is not empty: the report of the copy
// it holds of this very source (the digest of a read of the source, which
// writes nothing, finds it in mqlite_copies), or errs.ErrTargetNotEmpty.
func copiedBefore(ctx context.Context, read, write *sql.Tx, held string) (CopyReport, error) {
	rows, err := write.QueryContext(ctx, `SELECT digest, report FROM mqlite_copies`)
	if err != nil {
		return CopyReport{}, fmt.Errorf("look at the target: %w", err)
	}
	copies := map[string]string{}
	for rows.Next() {
		var digest, report string
		if err := rows.Scan(&digest, &report); err != nil {
			_ = rows.Close()
			return CopyReport{}, fmt.Errorf("look at the target: %w", err)
		}
		copies[digest] = report
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return CopyReport{}, fmt.Errorf("look at the target: %w", err)
	}
	if len(copies) == 0 {
		return CopyReport{}, fmt.Errorf("%w: the database already holds rows of %s; copy into a database without a store",
			errs.ErrTargetNotEmpty, held)
	}
	c := &copier{read: read, digest: sha256.New()}
	rep, err := c.run(ctx)
	if err != nil {
		return CopyReport{}, err
	}
	text, ok := copies[rep.Digest]
	if !ok {
		return CopyReport{}, fmt.Errorf("%w: the database holds a copy of another store, or of this one before it changed",
			errs.ErrTargetNotEmpty)
	}
	var before CopyReport
	if err := json.Unmarshal([]byte(text), &before); err != nil {
		return CopyReport{}, fmt.Errorf("the record of the earlier copy: %w", err)
	}
	before.AlreadyCopied = true
	return before, nil
}

// copier reads the source's tables in order and, when write is set,
// writes them into the target in batches; every value read goes into
// digest either way.
type copier struct {
	read     *sql.Tx
	write    *sql.Tx // nil: only read and digest
	digest   hash.Hash
	progress func(table string, rows int64)
	rep      CopyReport
	tops     map[string]int64 // the highest id of each table with a sequence
}

// copyTable is one table to copy: the query that reads it from SQLite in
// key order, the target's table and columns, and what becomes of each row
// read (its values in the target's columns, and what it counts).
type copyTable struct {
	name  string
	query string
	cols  []string
	row   func(c *copier, v []any) ([]any, error)
	count func(r *CopyReport) *int64
	// seq: the first column is the id of an identity column, whose
	// sequence the copy sets past the highest id copied.
	seq bool
}

// asRead keeps a row's values as SQLite gave them.
func asRead(_ *copier, v []any) ([]any, error) { return v, nil }

// copyOrder lists the tables, each after those it refers to.
var copyOrder = []copyTable{
	{
		name: "mqlite_queues",
		query: `SELECT name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms, default_ttl_ms,
			dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, created_at, updated_at,
			dedup_by_body, paused_at FROM mqlite_queues ORDER BY name`,
		cols: []string{"name", "ordering", "max_delivery_count", "lock_duration_ms", "dedup_window_ms", "default_ttl_ms",
			"dead_letter_on_ttl", "dlq_max_age_ms", "dlq_max_count", "dlq_max_bytes", "created_at", "updated_at",
			"dedup_by_body", "paused_at"},
		row: func(_ *copier, v []any) ([]any, error) {
			out := append([]any(nil), v...)
			for _, i := range []int{6, 12} { // the two flags, 0 or 1 on SQLite
				n, ok := v[i].(int64)
				if !ok {
					return nil, fmt.Errorf("queue %v: a flag of type %T", v[0], v[i])
				}
				out[i] = n != 0
			}
			return out, nil
		},
		count: func(r *CopyReport) *int64 { return &r.Queues },
	},
	{
		name:  "mqlite_topics",
		query: `SELECT name, created_at FROM mqlite_topics ORDER BY name`,
		cols:  []string{"name", "created_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.Topics },
	},
	{
		name:  "mqlite_subscriptions",
		query: `SELECT topic, queue, filter, created_at FROM mqlite_subscriptions ORDER BY topic, queue`,
		cols:  []string{"topic", "queue", "filter", "created_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.Subscriptions },
	},
	{
		// A body kept out of its row (body IS NULL) joins it; a completed
		// message has none (its body was dropped, and one kept apart waits
		// only for the janitor).
		name: "mqlite_messages",
		query: `SELECT id, queue, state, visible_at, locked_until, body_len, lock_token, delivery_count,
			expires_at, enqueued_at, message_id, group_id, subject, properties, content_key,
			CASE WHEN m.body IS NULL AND m.state <> 'completed'
			     THEN (SELECT b.body FROM mqlite_message_bodies b WHERE b.id = m.id) ELSE m.body END,
			dead_letter_reason, dead_letter_desc, dead_lettered_at, last_error, settled_at, priority, attempts
			FROM mqlite_messages m ORDER BY id`,
		cols: []string{"id", "queue", "state", "visible_at", "locked_until", "body_len", "lock_token", "delivery_count",
			"expires_at", "enqueued_at", "message_id", "group_id", "subject", "properties", "content_key",
			"body", "dead_letter_reason", "dead_letter_desc", "dead_lettered_at", "last_error", "settled_at", "priority",
			"attempts"},
		row: func(c *copier, v []any) ([]any, error) {
			id, _ := v[0].(int64)
			state, _ := v[2].(string)
			if v[15] == nil && state != "completed" {
				return nil, fmt.Errorf("message %d (%s) has no body: the source is damaged", id, state)
			}
			if b, ok := v[15].([]byte); ok {
				c.rep.BodyBytes += int64(len(b))
			}
			c.rep.ByState[state]++
			return v, nil
		},
		count: func(r *CopyReport) *int64 { return &r.Messages },
		seq:   true,
	},
	{
		// A MessageID (TEXT) keeps its text under kind 'id'; a content key
		// (BLOB) becomes its hex under kind 'body'.
		name:  "mqlite_dedup",
		query: `SELECT queue, key, seq, content_key, expires_at FROM mqlite_dedup ORDER BY queue, key`,
		cols:  []string{"queue", "kind", "key", "seq", "content_key", "expires_at"},
		row: func(_ *copier, v []any) ([]any, error) {
			kind, key := "id", ""
			switch k := v[1].(type) {
			case string:
				key = k
			case []byte:
				kind, key = "body", hex.EncodeToString(k)
			default:
				return nil, fmt.Errorf("dedup entry of queue %v: a key of type %T", v[0], v[1])
			}
			return []any{v[0], kind, key, v[2], v[3], v[4]}, nil
		},
		count: func(r *CopyReport) *int64 { return &r.DedupEntries },
	},
	{
		name: "mqlite_settlement_receipts",
		query: `SELECT seq, lock_token, operation, args, queue, expires_at FROM mqlite_settlement_receipts
			ORDER BY seq, lock_token, operation, args`,
		cols:  []string{"seq", "lock_token", "operation", "args", "queue", "expires_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.SettlementReceipts },
	},
	{
		name:  "mqlite_receive_attempts",
		query: `SELECT id, queue, attempt_id, request, result, expires_at FROM mqlite_receive_attempts ORDER BY id`,
		cols:  []string{"id", "queue", "attempt_id", "request", "result", "expires_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.ReceiveAttempts },
		seq:   true,
	},
	{
		name:  "mqlite_commits",
		query: `SELECT id, scope, idempotency_key, request, result, expires_at FROM mqlite_commits ORDER BY id`,
		cols:  []string{"id", "scope", "idempotency_key", "request", "result", "expires_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.CommitRecords },
		seq:   true,
	},
	{
		name:  "mqlite_access_keys",
		query: `SELECT id, secret_hash, scopes, created_at, revoked_at FROM mqlite_access_keys ORDER BY id`,
		cols:  []string{"id", "secret_hash", "scopes", "created_at", "revoked_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.AccessKeys },
	},
	{
		name: "mqlite_schedules",
		query: `SELECT name, target, cron, time_zone, interval_ms, anchor_at, catch_up, body, group_id, subject,
			properties, ttl_ms, next_at, last_at, last_error, fired, skipped, created_at, updated_at
			FROM mqlite_schedules ORDER BY name`,
		cols: []string{"name", "target", "cron", "time_zone", "interval_ms", "anchor_at", "catch_up", "body", "group_id", "subject",
			"properties", "ttl_ms", "next_at", "last_at", "last_error", "fired", "skipped", "created_at", "updated_at"},
		row:   asRead,
		count: func(r *CopyReport) *int64 { return &r.Schedules },
	},
}

// run copies (or only reads) every table, then the sequences, and
// returns the report with the digest.
func (c *copier) run(ctx context.Context) (CopyReport, error) {
	var token string
	if err := c.read.QueryRowContext(ctx, `SELECT token FROM mqlite_guard WHERE id = 1`).Scan(&token); err != nil {
		return CopyReport{}, fmt.Errorf("read the source's guard: %w", err)
	}
	if token != Token {
		return CopyReport{}, fmt.Errorf("%w: the source has %q, this binary copies %q", errs.ErrSchemaVersionMismatch, token, Token)
	}
	c.hashValue(token)
	c.tops = map[string]int64{}
	c.rep.ByState = map[string]int64{}
	for _, t := range copyOrder {
		n, err := c.table(ctx, t)
		if err != nil {
			return CopyReport{}, fmt.Errorf("%s: %w", t.name, err)
		}
		*t.count(&c.rep) = n
	}
	// Every queue's and topic's name in the namespace both share (a SQLite
	// store never gives one name to both: its creations are serialized).
	if c.write != nil {
		if _, err := c.write.ExecContext(ctx, `INSERT INTO mqlite_names (name, kind)
			SELECT name, 'queue' FROM mqlite_queues UNION ALL SELECT name, 'topic' FROM mqlite_topics`); err != nil {
			return CopyReport{}, fmt.Errorf("name the queues and the topics: %w", err)
		}
	}
	// The next message id is past the highest ever given, deleted ones
	// included (mqlite_sequence keeps that floor on SQLite).
	var floor int64
	if err := c.read.QueryRowContext(ctx, `SELECT coalesce((SELECT floor FROM mqlite_sequence WHERE id = 1), 0)`).Scan(&floor); err != nil {
		return CopyReport{}, fmt.Errorf("read the source's sequence: %w", err)
	}
	c.hashValue(floor)
	c.tops["mqlite_messages"] = max(c.tops["mqlite_messages"], floor)
	c.rep.NextMessageID = c.tops["mqlite_messages"] + 1
	for _, t := range copyOrder {
		if !t.seq || c.write == nil {
			continue
		}
		// setval(seq, n, true) makes n+1 the next id; a table that never
		// had a row starts at 1.
		last := c.tops[t.name]
		if _, err := c.write.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence($1, 'id'), $2, $3)`,
			t.name, max(last, 1), last > 0); err != nil {
			return CopyReport{}, fmt.Errorf("set the sequence of %s: %w", t.name, err)
		}
	}
	c.rep.Digest = hex.EncodeToString(c.digest.Sum(nil))
	return c.rep, nil
}

// table copies one table, streaming: rows go out in multi-row inserts of
// at most copyBatchRows rows and about copyBatchBytes bytes.
func (c *copier) table(ctx context.Context, t copyTable) (int64, error) {
	c.hashValue(t.name)
	rows, err := c.read.QueryContext(ctx, t.query)
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	defer rows.Close()
	width, err := rows.Columns()
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	limit := min(copyBatchRows, maxParams/len(t.cols))
	var batch []any
	var n, inBatch, bytes int64
	flush := func() error {
		if inBatch == 0 || c.write == nil {
			inBatch, bytes, batch = 0, 0, batch[:0]
			return nil
		}
		if _, err := c.write.ExecContext(ctx, insertSQL(t.name, t.cols, int(inBatch)), batch...); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if c.progress != nil {
			c.progress(t.name, n)
		}
		inBatch, bytes, batch = 0, 0, batch[:0]
		return nil
	}
	vals := make([]any, len(width))
	ptrs := make([]any, len(width))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, fmt.Errorf("read: %w", err)
		}
		for _, v := range vals {
			c.hashValue(v)
			bytes += sizeOf(v)
		}
		out, err := t.row(c, vals)
		if err != nil {
			return 0, err
		}
		if id, ok := vals[0].(int64); ok && t.seq {
			c.tops[t.name] = max(c.tops[t.name], id)
		}
		batch = append(batch, out...)
		n++
		inBatch++
		if inBatch >= int64(limit) || bytes >= copyBatchBytes {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	if err := flush(); err != nil {
		return 0, err
	}
	c.hashValue(n)
	return n, nil
}

// insertSQL is the multi-row insert of n rows into table's cols.
func insertSQL(table string, cols []string, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES ")
	p := 1
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for i := range cols {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// sizeOf is about the bytes v takes in a batch.
func sizeOf(v any) int64 {
	switch v := v.(type) {
	case []byte:
		return int64(len(v))
	case string:
		return int64(len(v))
	}
	return 8
}

// hashValue feeds one value into the digest, tagged with its type and
// length, so that no two sequences of values hash alike.
func (c *copier) hashValue(v any) {
	var buf [9]byte
	put := func(tag byte, n uint64) {
		buf[0] = tag
		binary.BigEndian.PutUint64(buf[1:], n)
		c.digest.Write(buf[:])
	}
	switch v := v.(type) {
	case nil:
		put('n', 0)
	case int64:
		put('i', uint64(v))
	case float64:
		put('f', math.Float64bits(v))
	case string:
		put('s', uint64(len(v)))
		c.digest.Write([]byte(v))
	case []byte:
		put('b', uint64(len(v)))
		c.digest.Write(v)
	default:
		s := fmt.Sprintf("%T:%v", v, v)
		put('?', uint64(len(s)))
		c.digest.Write([]byte(s))
	}
}
