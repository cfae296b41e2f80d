package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// The classes of the transaction advisory locks the engine takes, as SQL:
// the first key of pg_advisory_xact_lock(int, int), the second being a hash
// of what the lock guards. The two-key form keeps them apart from an
// application's one-key locks.
const (
	// lockGroup guards a message group of a queue while a send into it
	// commits: 0x6d716c31, "mql1".
	lockGroup = "1836149809"
	// lockAttempt guards a receive attempt id of a queue while a Receive
	// tagged with it claims and records: 0x6d716c32, "mql2".
	lockAttempt = "1836149810"
)

// sendSQL enqueues a batch of messages into the queue $1 at the store's now
// $2 in one statement, and answers one row per slot. The slots come as
// arrays ($3 MessageID, $4 GroupID, $5 subject, $6 properties, "" for
// none; $7 content key, $8 body, $9 DeliverAt, $10 TTL, $11 priority).
//
//   - q reads the queue once; no queue, no rows at all.
//   - k gives each slot its group (the caller's, the empty one on a FIFO
//     queue, or none) and its dedup key: kind 'id' for a MessageID, 'body'
//     for the content key (as hex) on a queue that deduplicates bodies,
//     none without a dedup window. rn numbers the slots of one key, so that
//     only the first writes the dedup row.
//   - l takes the advisory lock of every group the batch sends into, in
//     one order (no two sends deadlock on each other's groups), before
//     any id is drawn: a send into a group waits for the group's earlier
//     sends to commit, so the group's ids are in commit order, which the
//     claim's group rule needs (a snapshot that sees a member sees every
//     earlier one).
//   - s draws the ids in slot order, after l (it joins l's one row).
//   - d writes the dedup rows. A live row of the key (another message
//     inside the window, perhaps committed a moment ago by another
//     process: ON CONFLICT waits for it and reads its latest version) is
//     left as it is and returned; an expired one is replaced. Either way
//     it returns the key's row, so a slot learns its original's seq and
//     content key in the same statement. The rows go in key order, so two
//     sends of the same keys in other orders wait for each other instead
//     of deadlocking.
//   - m inserts the slots without a key, and those whose key's row is now
//     theirs.
//
// A slot's answer is its id, and its key's row (seq, content key): the
// slot was written when the row's seq is its id or it has no key.
var sendSQL = `WITH q AS (
	SELECT ordering = 'fifo' AS fifo, dedup_window_ms AS win, dedup_by_body AS by_body, default_ttl_ms AS ttl
	  FROM mqlite_queues WHERE name = $1),
i AS (
	SELECT u.*,
	       CASE WHEN q.win = 0 THEN NULL WHEN u.mid <> '' THEN 'id' WHEN q.by_body THEN 'body' END AS kind,
	       CASE WHEN u.gid <> '' THEN u.gid WHEN q.fifo THEN '' END AS grp
	  FROM q, unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::bytea[],
	                 $9::bigint[], $10::bigint[], $11::smallint[])
	       WITH ORDINALITY AS u(mid, gid, subj, props, ckey, body, at, ttl, pri, n)),
k AS (
	SELECT i.*, CASE i.kind WHEN 'id' THEN i.mid WHEN 'body' THEN encode(i.ckey, 'hex') END AS key
	  FROM i),
r AS (
	SELECT k.*, row_number() OVER (PARTITION BY k.kind, k.key ORDER BY k.n) AS rn FROM k),
l AS (
	SELECT count(*) AS n FROM (
		SELECT pg_advisory_xact_lock(` + lockGroup + `, g.h) FROM (
			SELECT DISTINCT hashtext($1 || chr(1) || grp) AS h FROM k WHERE grp IS NOT NULL ORDER BY 1) g) x),
s AS (
	SELECT o.*, nextval('mqlite_messages_id_seq') AS id
	  FROM (SELECT * FROM r ORDER BY n) o CROSS JOIN l),
d AS (
	INSERT INTO mqlite_dedup AS x (queue, kind, key, seq, content_key, expires_at)
	SELECT $1, s.kind, s.key, s.id, CASE WHEN s.kind = 'id' THEN s.ckey END, $2 + q.win
	  FROM s, q WHERE s.kind IS NOT NULL AND s.rn = 1
	 ORDER BY s.kind, s.key
	ON CONFLICT (queue, kind, key) DO UPDATE SET
		seq = CASE WHEN x.expires_at <= $2 THEN excluded.seq ELSE x.seq END,
		content_key = CASE WHEN x.expires_at <= $2 THEN excluded.content_key ELSE x.content_key END,
		expires_at = CASE WHEN x.expires_at <= $2 THEN excluded.expires_at ELSE x.expires_at END
	RETURNING x.kind, x.key, x.seq, x.content_key),
m AS (
	INSERT INTO mqlite_messages (id, queue, state, visible_at, expires_at, enqueued_at,
		message_id, group_id, subject, properties, content_key, body_len, body, priority)
	SELECT s.id, $1, CASE WHEN s.at > $2 THEN 'scheduled' ELSE 'active' END, greatest(s.at, $2),
	       CASE WHEN s.ttl > 0 THEN $2 + s.ttl WHEN q.ttl > 0 THEN $2 + q.ttl ELSE 0 END, $2,
	       nullif(s.mid, ''), s.grp, nullif(s.subj, ''), nullif(s.props, ''), s.ckey,
	       octet_length(s.body), s.body, s.pri
	  FROM s CROSS JOIN q LEFT JOIN d ON d.kind = s.kind AND d.key = s.key
	 WHERE s.kind IS NULL OR d.seq = s.id
	RETURNING id, state, body_len)
SELECT s.n, s.id, s.kind IS NOT NULL, coalesce(d.seq, 0), d.content_key, coalesce(m.state, ''), coalesce(m.body_len, 0),
       (q.win = 0 OR NOT q.by_body) AND NOT q.fifo
  FROM s CROSS JOIN q LEFT JOIN d ON d.kind = s.kind AND d.key = s.key LEFT JOIN m ON m.id = s.id
 ORDER BY s.n`

// plainQueue is the condition, on the row of mqlite_queues named $1, of a
// queue that plain messages (plainBatch) go into with a plain insert: no
// dedup key for a message without a MessageID (no dedup window, or a
// window that does not deduplicate bodies: nothing to look up or record)
// and not FIFO (no group to lock). The plain statements read it in the
// statement that inserts, from the same snapshot as sendSQL's q reads it,
// so a queue altered meanwhile by another process is judged as sendSQL
// would judge it: a queue that now deduplicates bodies inserts nothing,
// and the full statement (sendSQL) runs instead.
const plainQueue = `name = $1 AND (dedup_window_ms = 0 OR NOT dedup_by_body) AND ordering <> 'fifo'`

// plainColumns is the columns of mqlite_messages a plain statement writes.
// content_key is empty: it is read only through a dedup row, which a
// plain message never has (it has no MessageID, and its queue does not
// deduplicate bodies), so the send spares the body's SHA-256.
const plainColumns = `(queue, state, visible_at, expires_at, enqueued_at, subject, properties, content_key,
	body_len, body, priority)`

// plainOneSQL sends one plain message into the queue $1 at now $2 ($3
// subject, $4 properties, "" for none; $5 body, $6 DeliverAt, $7 TTL, $8
// priority): one row when the queue is plainQueue, none otherwise.
const plainOneSQL = `INSERT INTO mqlite_messages ` + plainColumns + `
	SELECT $1, CASE WHEN $6::bigint > $2::bigint THEN 'scheduled' ELSE 'active' END, greatest($6::bigint, $2::bigint),
	       CASE WHEN $7::bigint > 0 THEN $2 + $7 WHEN default_ttl_ms > 0 THEN $2 + default_ttl_ms ELSE 0 END, $2,
	       nullif($3::text, ''), nullif($4::text, ''), '\x'::bytea, octet_length($5::bytea), $5, $8::smallint
	  FROM mqlite_queues WHERE ` + plainQueue + `
	RETURNING id, state, body_len`

// plainManySQL is plainOneSQL for a batch, as arrays ($3 subject, $4
// properties, $5 body, $6 DeliverAt, $7 TTL, $8 priority): s draws the ids
// in slot order, as sendSQL's s does, and the answer is one row per slot
// in slot order, none when the queue is not plainQueue.
var plainManySQL = `WITH q AS (SELECT default_ttl_ms AS ttl FROM mqlite_queues WHERE ` + plainQueue + `),
s AS (
	SELECT o.*, nextval('mqlite_messages_id_seq') AS id
	  FROM (SELECT u.* FROM q, unnest($3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[], $8::smallint[])
	                    WITH ORDINALITY AS u(subj, props, body, at, ttl, pri, n) ORDER BY u.n) o),
m AS (
	INSERT INTO mqlite_messages (id, ` + plainColumns[1:] + `
	SELECT s.id, $1, CASE WHEN s.at > $2 THEN 'scheduled' ELSE 'active' END, greatest(s.at, $2),
	       CASE WHEN s.ttl > 0 THEN $2 + s.ttl WHEN q.ttl > 0 THEN $2 + q.ttl ELSE 0 END, $2,
	       nullif(s.subj, ''), nullif(s.props, ''), '\x'::bytea, octet_length(s.body), s.body, s.pri
	  FROM s CROSS JOIN q
	RETURNING id, state, body_len)
SELECT m.id, m.state, m.body_len FROM m JOIN s ON s.id = m.id ORDER BY s.n`

// Enqueue sends msgs into the queue or the topic name inside tx at the
// store's now (nowOf): every message of a batch to a queue in one
// statement (sendSQL). A topic's messages go to each subscription whose
// filter they pass, one statement per subscription. A slot that fails (a
// dedup conflict) gets Seq 0 and its own Err while the others go on;
// errors of the whole call (an unknown queue or topic, a DeliverAt too far
// ahead, a message over the store's limit) come before anything is
// written.
func (PostgreSQL) Enqueue(ctx context.Context, tx driver.DBTX, name string, msgs []driver.SendMessage) ([]driver.SendResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	now, err := nowOf(tx)
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	if err := checkDeliverAt(msgs, now); err != nil {
		return nil, err
	}
	if err := checkSizes(ctx, tx, name, msgs); err != nil {
		return nil, err
	}
	copies, found, err := sendPlain(ctx, tx, name, msgs, now)
	if err == nil && !found {
		copies, found, err = sendQueue(ctx, tx, name, msgs, now)
	}
	if err != nil {
		return nil, err
	}
	if found {
		out := make([]driver.SendResult, len(msgs))
		for i, c := range copies {
			out[i] = driver.SendResult{Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Err, Copies: []driver.Copy{c}}
		}
		return out, nil
	}
	out, err := publish(ctx, tx, name, msgs, now)
	if err == nil && plainBatch(msgs) {
		notPlain.Store(plainKey{storeOf(tx), name}, struct{}{}) // a topic: never a plain queue
	}
	return out, err
}

// checkDeliverAt refuses a DeliverAt more than MaxDelay after now.
func checkDeliverAt(msgs []driver.SendMessage, now int64) error {
	for i, m := range msgs {
		if m.DeliverAt-now > driver.MaxDelay.Milliseconds() {
			err := errs.Invalidf(errs.ErrInvalidMessage, "DeliverAt %s is more than %v ahead",
				time.UnixMilli(m.DeliverAt).UTC().Format(time.RFC3339), driver.MaxDelay)
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return err
		}
	}
	return nil
}

// checkSizes refuses a message over the store's limit (maxBytesOf). An
// unknown target is said first, as the SQLite engine does: only a call
// with a message over the limit pays for the look.
func checkSizes(ctx context.Context, tx driver.DBTX, name string, msgs []driver.SendMessage) error {
	limit := maxBytesOf(tx)
	for i, m := range msgs {
		if m.Size() <= limit {
			continue
		}
		var known bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_queues WHERE name = $1)
			OR EXISTS (SELECT 1 FROM mqlite_topics WHERE name = $1)`, name).Scan(&known); err != nil {
			return interpret("send", err)
		}
		if !known {
			return fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
		}
		err := fmt.Errorf("%w: %d bytes with its metadata, the limit is %d", errs.ErrMessageTooLarge, m.Size(), limit)
		if len(msgs) > 1 {
			err = fmt.Errorf("message %d: %w", i, err)
		}
		return err
	}
	return nil
}

// plainBatch reports whether msgs are plain: none has a MessageID or a
// GroupID, so that into a queue that neither deduplicates bodies nor
// orders FIFO (plainQueue) each is one row of mqlite_messages and nothing
// else.
func plainBatch(msgs []driver.SendMessage) bool {
	for _, m := range msgs {
		if m.MessageID != "" || m.GroupID != "" {
			return false
		}
	}
	return true
}

// notPlain remembers, per store and name, a target that plain messages
// found not plainQueue (a queue that deduplicates bodies or orders FIFO,
// a topic), so that its next sends go to the full statement at once
// instead of paying for a plain one that inserts nothing. It is only a
// hint: either statement judges the queue as it is when it runs; sendQueue
// forgets a queue it finds plain again. Only a target that exists is
// remembered, so names sent to in vain do not fill it.
var notPlain sync.Map // plainKey → struct{}

// plainKey names a target of the store st (nil: a handle of no store).
type plainKey struct {
	st   *store
	name string
}

// sendPlain sends plain messages (plainBatch) into queue when it is
// plainQueue, in one plain statement, and returns each slot's copy; found
// is false when it wrote nothing (the messages or the target are not
// plain: the caller runs sendSQL).
func sendPlain(ctx context.Context, tx driver.DBTX, queue string, msgs []driver.SendMessage, now int64) ([]driver.Copy, bool, error) {
	if !plainBatch(msgs) {
		return nil, false, nil
	}
	if _, ok := notPlain.Load(plainKey{storeOf(tx), queue}); ok {
		return nil, false, nil
	}
	n := len(msgs)
	var rows *sql.Rows
	var err error
	if n == 1 {
		m := msgs[0]
		rows, err = tx.QueryContext(ctx, plainOneSQL, queue, now, m.Subject, m.Properties, nonNil(m.Body),
			m.DeliverAt, m.TTLMS, int16(m.Priority))
	} else {
		subjs, props, bodies := make([]string, n), make([]string, n), make([][]byte, n)
		ats, ttls, pris := make([]int64, n), make([]int64, n), make([]int16, n)
		for i, m := range msgs {
			subjs[i], props[i], bodies[i] = m.Subject, m.Properties, nonNil(m.Body)
			ats[i], ttls[i], pris[i] = m.DeliverAt, m.TTLMS, int16(m.Priority)
		}
		rows, err = tx.QueryContext(ctx, plainManySQL, queue, now, subjs, props, bodies, ats, ttls, pris)
	}
	if err != nil {
		return nil, false, interpret("send", err)
	}
	defer rows.Close()
	out := make([]driver.Copy, 0, n)
	rep := reporterOf(tx)
	for rows.Next() {
		var id, bytes int64
		var state string
		if err := rows.Scan(&id, &state, &bytes); err != nil {
			return nil, false, interpret("send", err)
		}
		rep.change(queue, "", state, bytes)
		out = append(out, driver.Copy{Queue: queue, Seq: id})
	}
	if err := rows.Err(); err != nil {
		return nil, false, interpret("send", err)
	}
	if len(out) == 0 {
		return nil, false, nil // the hint is left to what finds the target (sendQueue, Enqueue)
	}
	if len(out) != n {
		return nil, false, fmt.Errorf("send: %d messages answered %d rows", n, len(out))
	}
	rep.done()
	return out, true, nil
}

// sendQueue runs sendSQL for msgs into queue and returns each slot's copy;
// found is false when queue is not a queue (nothing was written).
func sendQueue(ctx context.Context, tx driver.DBTX, queue string, msgs []driver.SendMessage, now int64) ([]driver.Copy, bool, error) {
	n := len(msgs)
	mids, gids, subjs, props := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ckeys, bodies := make([][]byte, n), make([][]byte, n)
	ats, ttls, pris := make([]int64, n), make([]int64, n), make([]int16, n)
	for i, m := range msgs {
		mids[i], gids[i], subjs[i], props[i] = m.MessageID, m.GroupID, m.Subject, m.Properties
		ckeys[i] = driver.ContentKey(m.Body)
		bodies[i] = m.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
		ats[i], ttls[i], pris[i] = m.DeliverAt, m.TTLMS, int16(m.Priority)
	}
	rows, err := tx.QueryContext(ctx, sendSQL, queue, now, mids, gids, subjs, props, ckeys, bodies, ats, ttls, pris)
	if err != nil {
		return nil, false, interpret("send", err)
	}
	defer rows.Close()
	out := make([]driver.Copy, 0, n)
	rep := reporterOf(tx)
	plain := false
	for rows.Next() {
		var slot, id, orig, bytes int64
		var keyed bool
		var origKey []byte
		var state string
		if err := rows.Scan(&slot, &id, &keyed, &orig, &origKey, &state, &bytes, &plain); err != nil {
			return nil, false, interpret("send", err)
		}
		if state != "" { // the row was written
			rep.change(queue, "", state, bytes)
		}
		c := driver.Copy{Queue: queue, Seq: id}
		if keyed && orig != id {
			c = dedupCopy(queue, orig, origKey, ckeys[slot-1])
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, interpret("send", err)
	}
	if len(out) == 0 {
		return nil, false, nil
	}
	if len(out) != n {
		return nil, false, fmt.Errorf("send: %d messages answered %d rows", n, len(out))
	}
	if key := (plainKey{storeOf(tx), queue}); plain {
		notPlain.Delete(key)
	} else if plainBatch(msgs) {
		notPlain.Store(key, struct{}{})
	}
	rep.done()
	return out, true, nil
}

// dedupCopy is the copy of a slot whose key matched the live dedup row
// (seq, origKey): a duplicate when the bodies agree, a conflict when they
// differ. A row keyed by content has no origKey: its key is the content.
func dedupCopy(queue string, seq int64, origKey, ckey []byte) driver.Copy {
	if origKey != nil && string(origKey) != string(ckey) {
		return driver.Copy{Queue: queue, Err: fmt.Errorf("%w: the message id is seq %d", errs.ErrDuplicateConflict, seq)}
	}
	return driver.Copy{Queue: queue, Seq: seq, Duplicate: true}
}

// publish writes one copy of each message into every subscription of the
// topic whose filter it passes, one statement per subscription, all in tx:
// every copy commits or none does. A message no subscription takes writes
// nothing and is not an error (Seq 0, no Copies). A slot's Seq, Duplicate
// and Err are those of its first copy, in the subscriptions' queue order.
// A name that is neither a queue nor a topic is errs.ErrQueueNotFound.
func publish(ctx context.Context, tx driver.DBTX, topic string, msgs []driver.SendMessage, now int64) ([]driver.SendResult, error) {
	rows, err := tx.QueryContext(ctx, `SELECT s.queue, s.filter FROM mqlite_topics t
		LEFT JOIN mqlite_subscriptions s ON s.topic = t.name WHERE t.name = $1 ORDER BY s.queue`, topic)
	if err != nil {
		return nil, interpret("send", err)
	}
	type sub struct {
		queue  string
		filter driver.Filter
	}
	var subs []sub
	isTopic := false
	for rows.Next() {
		var queue, filter sql.NullString
		if err := rows.Scan(&queue, &filter); err != nil {
			rows.Close()
			return nil, interpret("send", err)
		}
		isTopic = true
		if !queue.Valid {
			continue
		}
		s := sub{queue: queue.String}
		if err := json.Unmarshal([]byte(filter.String), &s.filter); err != nil {
			rows.Close()
			return nil, fmt.Errorf("send: subscription %s/%s: filter: %w", topic, s.queue, err)
		}
		subs = append(subs, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, interpret("send", err)
	}
	if !isTopic {
		return nil, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, topic)
	}
	out := make([]driver.SendResult, len(msgs))
	for _, s := range subs {
		var slots []int
		var batch []driver.SendMessage
		for i, m := range msgs {
			if s.filter.Matches(m.Subject, m.Props) {
				slots = append(slots, i)
				batch = append(batch, m)
			}
		}
		if len(batch) == 0 {
			continue
		}
		copies, found, err := sendQueue(ctx, tx, s.queue, batch, now)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("send: subscription %s/%s: %w: %q", topic, s.queue, errs.ErrQueueNotFound, s.queue)
		}
		for j, c := range copies {
			out[slots[j]].Copies = append(out[slots[j]].Copies, c)
		}
	}
	for i := range out {
		if len(out[i].Copies) > 0 {
			first := out[i].Copies[0]
			out[i].Seq, out[i].Duplicate, out[i].Err = first.Seq, first.Duplicate, first.Err
		}
	}
	return out, nil
}

// interpret translates PostgreSQL's errors into mqlite's: a database
// without the layout is errs.ErrNotAStore, a full disk errs.ErrDiskFull, a
// read-only transaction or server errs.ErrReadOnly. It reads the error's
// SQLSTATE, never its text.
func interpret(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "42P01": // undefined_table: every table a statement names is mqlite's
			return fmt.Errorf("%s: %w: the database has no mqlite layout: %w", op, errs.ErrNotAStore, err)
		case pe.Code == "53100": // disk_full
			return fmt.Errorf("%s: %w: %w", op, errs.ErrDiskFull, err)
		case pe.Code == "25006": // read_only_sql_transaction
			return fmt.Errorf("%s: %w: %w", op, errs.ErrReadOnly, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
