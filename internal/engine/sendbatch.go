package engine

import (
	"context"
	"fmt"
	"strings"
)

// maxChunk is the most messages one multi-row insert writes. A batch is cut
// into chunks whose sizes are powers of two, so that at most eight
// statement texts (1 to 128 rows) sit in the connection's statement cache.
const maxChunk = 128

// rowParams is how many parameters one row of a multi-row insert binds.
const rowParams = 9

// chunkSQL returns the multi-row insert of n messages into the queue ?1 and
// the dedup lookup of their n keys. The lookup joins the keys, a VALUES
// list, to the dedup table (CROSS JOIN: the keys lead); a "key IN (...)"
// of parameters was first copied into a temporary b-tree, half the
// lookup's cost. The insert takes its rows from a VALUES list in slot
// order, each with its seq (column8, numbered from nextSeq by
// insertChunk): a SELECT that read mqlite_messages itself would make
// SQLite copy the rows into a temporary table before inserting them. The
// queue's settings and the store's clock are scalar subqueries that SQLite
// evaluates once per statement. Only ungrouped messages of a standard queue
// with an inline body come here: no group hold to compute, no second table
// to write.
func chunkSQL(n int) (insertSQL, lookupSQL string) {
	var ins, look strings.Builder
	ins.WriteString(`INSERT INTO mqlite_messages (id, queue, state, held, visible_at, expires_at, enqueued_at,
	message_id, subject, properties, content_key, body_len, body, priority)
SELECT column8, ?1, CASE WHEN column1 > (SELECT mqlite_now()) THEN 'scheduled' ELSE 'active' END, 0,
	max(column1, (SELECT mqlite_now())),
	CASE WHEN column2 > 0 THEN (SELECT mqlite_now()) + column2
	     WHEN (SELECT default_ttl_ms FROM mqlite_queues WHERE name = ?1) > 0
	     THEN (SELECT mqlite_now()) + (SELECT default_ttl_ms FROM mqlite_queues WHERE name = ?1)
	     ELSE 0 END,
	(SELECT mqlite_now()), column3, column4, column5, column6, length(column7), column7, column9
FROM (VALUES `)
	look.WriteString(`SELECT key, seq, content_key FROM (VALUES `)
	// The rows' parameters are anonymous: SQLite numbers them 2, 3, ... in
	// text order after ?1. Numbered ones (?2 ... ?897) would each be looked
	// up by name in a list as long as the statement's parameters on every
	// bind, a cost that grows with the square of the chunk (7% of a batched
	// send's CPU at 128 rows).
	row := "(?" + strings.Repeat(", ?", rowParams-1) + ")"
	for i := range n {
		if i > 0 {
			ins.WriteString(", ")
			look.WriteString(", ")
		}
		ins.WriteString(row)
		if i == 0 {
			// The lookup's keys come before its ?1 in the text: the
			// first is numbered, so that the others follow it (3, 4, ...).
			look.WriteString("(?2)")
		} else {
			look.WriteString("(?)")
		}
	}
	ins.WriteString(")")
	look.WriteString(`) CROSS JOIN mqlite_dedup ON queue = ?1 AND key = column1 AND expires_at > mqlite_now()`)
	return ins.String(), look.String()
}

// chunkSQLs holds chunkSQL for every power of two up to maxChunk.
var chunkSQLs = bySize(maxChunk, func(n int) [2]string {
	insert, lookup := chunkSQL(n)
	return [2]string{insert, lookup}
})

// bySize holds what build returns (statement texts) for every power of two
// up to most: the sizes of a batch's statements, so that a few texts cover
// every batch in the connection's statement cache.
func bySize[T any](most int, build func(n int) T) map[int]T {
	m := map[int]T{}
	for n := 1; n <= most; n *= 2 {
		m[n] = build(n)
	}
	return m
}

// batchable reports whether m can go through a multi-row insert.
func batchable(t target, m SendMessage) bool {
	return !t.fifo && m.GroupID == "" && len(m.Body) <= InlineBodyMax
}

// keyOf is a dedup key as a map key: its kind (TEXT or BLOB) and bytes, so
// that the two kinds never meet here either.
func keyOf(k any) string {
	switch k := k.(type) {
	case string:
		return "t" + k
	case []byte:
		return "b" + string(k)
	}
	return ""
}

// pending is one slot of a chunk.
type pending struct {
	slot int
	m    SendMessage
	ckey []byte
	key  any // the dedup key; nil for a message that has none
}

// sendBatch enqueues a batch of two or more messages into the queue name
// (target t, already checked), in slot order. Runs of batchable messages go
// through multi-row inserts; the others through insert, one by one.
func sendBatch(ctx context.Context, db DBTX, name string, t target, msgs []SendMessage) ([]SendResult, error) {
	out := make([]SendResult, len(msgs))
	var run []pending
	flush := func() error {
		for len(run) > 0 {
			n := maxChunk
			for n > len(run) {
				n /= 2
			}
			if err := sendChunk(ctx, db, name, t, run[:n], out); err != nil {
				return err
			}
			run = run[n:]
		}
		return nil
	}
	for i, m := range msgs {
		ckey := contentKey(m.Body)
		if batchable(t, m) {
			p := pending{slot: i, m: m, ckey: ckey}
			if m.MessageID != "" || t.byBody {
				p.key = dedupKey(m.MessageID, ckey)
			}
			run = append(run, p)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		c, err := insert(ctx, db, name, m, ckey)
		if err != nil {
			return nil, err
		}
		out[i] = SendResult{Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Err, Copies: []Copy{c}}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// sendChunk writes one chunk (a power of two in size): it looks its keys up
// in the dedup window (a slot without a key binds NULL, which matches
// nothing), answers the duplicates and conflicts (with the
// window, also those among the chunk's own slots: a later slot with an
// earlier slot's key is its duplicate), and inserts the rest in one
// statement.
func sendChunk(ctx context.Context, db DBTX, name string, t target, chunk []pending, out []SendResult) error {
	sqls := hotChunks[len(chunk)]
	type seen struct {
		seq  int64 // 0: a slot of this chunk, not yet numbered
		slot int   // that slot
		ckey []byte
	}
	found := map[string]seen{}
	keyed := false
	for _, p := range chunk {
		keyed = keyed || p.key != nil
	}
	if t.windowMS > 0 && keyed {
		args := make([]any, 1+len(chunk))
		args[0] = name
		for i, p := range chunk {
			args[1+i] = p.key
		}
		if err := sqls[1].each(ctx, db, args, func(row scanner) error {
			var k any
			var s seen
			if err := row.Scan(&k, &s.seq, &s.ckey); err != nil {
				return err
			}
			found[keyOf(k)] = s
			return nil
		}); err != nil {
			return interpret("send", err)
		}
	}
	fresh := make([]pending, 0, len(chunk))
	var later []pending // slots that repeat a key of this chunk
	for _, p := range chunk {
		if t.windowMS > 0 && p.key != nil {
			k := keyOf(p.key)
			if s, ok := found[k]; ok {
				if s.seq == 0 {
					later = append(later, p)
					continue
				}
				out[p.slot] = fromResult(name, dedupResult(s.seq, s.ckey, p.ckey))
				continue
			}
			var orig []byte
			if p.m.MessageID != "" {
				orig = p.ckey
			}
			found[k] = seen{slot: p.slot, ckey: orig}
		}
		fresh = append(fresh, p)
	}
	if len(fresh) > 0 {
		if err := insertChunk(ctx, db, name, t, fresh, out); err != nil {
			return err
		}
	}
	for _, p := range later {
		s := found[keyOf(p.key)]
		out[p.slot] = fromResult(name, dedupResult(out[s.slot].Seq, s.ckey, p.ckey))
	}
	return nil
}

// insertChunk inserts fresh, which holds no key of a live dedup row and no
// key twice, in multi-row statements of power-of-two sizes, numbers the
// slots and writes their dedup rows (a queue with a window).
func insertChunk(ctx context.Context, db DBTX, name string, t target, fresh []pending, out []SendResult) error {
	for len(fresh) > 0 {
		n := maxChunk
		for n > len(fresh) {
			n /= 2
		}
		var first int64
		if err := hotNextSeq.row(ctx, db).Scan(&first); err != nil {
			return interpret("send", err)
		}
		args := make([]any, 1, 1+n*rowParams)
		args[0] = name
		for i, p := range fresh[:n] {
			body := p.m.Body
			if body == nil {
				body = []byte{}
			}
			args = append(args, p.m.DeliverAt, p.m.TTLMS, nullString(p.m.MessageID), nullString(p.m.Subject),
				nullString(p.m.Properties), p.ckey, body, first+int64(i), p.m.Priority)
		}
		res, err := hotChunks[n][0].exec(ctx, db, args...)
		if err != nil {
			return interpret("send", err)
		}
		if res.rows != int64(n) {
			return fmt.Errorf("send: a multi-row insert of %d messages wrote %d", n, res.rows)
		}
		for i, p := range fresh[:n] {
			seq := first + int64(i)
			out[p.slot] = SendResult{Seq: seq, Copies: []Copy{{Queue: name, Seq: seq}}}
		}
		if t.windowMS > 0 {
			if err := insertDedups(ctx, db, name, t, fresh[:n], out); err != nil {
				return err
			}
		}
		fresh = fresh[n:]
	}
	return nil
}

// dedupParams is how many parameters one row of dedupSQL binds.
const dedupParams = 3

// dedupSQL returns the insert of n dedup rows of the queue ?1, each
// expiring ?2 ms (the window) after its message's enqueued_at, from (key,
// seq, content_key) rows of anonymous parameters; a padding row is all NULL
// and writes none. A send writes the
// dedup rows of its messages with it, in the same transaction: one
// statement for a chunk of a batch, where a trigger ran a program and read
// the queue for every message.
func dedupSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR REPLACE INTO mqlite_dedup (queue, key, seq, content_key, expires_at)
	SELECT ?1, column1, column2, column3, m.enqueued_at + ?2 FROM (VALUES `)
	row := "(?" + strings.Repeat(", ?", dedupParams-1) + ")"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(`) CROSS JOIN mqlite_messages m ON m.id = column2 WHERE column1 IS NOT NULL`)
	return b.String()
}

// dedupSQLs holds dedupSQL for every power of two up to maxChunk.
var dedupSQLs = bySize(maxChunk, dedupSQL)

// The hot statements of a batch (hot.go): chunkSQLs' and dedupSQLs', and
// the next seq.
var (
	hotChunks = bySize(maxChunk, func(n int) [2]*hotQuery {
		return [2]*hotQuery{hot(chunkSQLs[n][0]), hot(chunkSQLs[n][1])}
	})
	hotDedups  = bySize(maxChunk, func(n int) *hotQuery { return hot(dedupSQLs[n]) })
	hotNextSeq = hot(`SELECT ` + nextSeq)
)

// insertDedups writes the dedup rows of the slots of inserted that have a
// key, numbered in out, with one statement (inserted holds at most
// maxChunk slots).
func insertDedups(ctx context.Context, db DBTX, name string, t target, inserted []pending, out []SendResult) error {
	args := make([]any, 2, 2+len(inserted)*dedupParams)
	args[0], args[1] = name, t.windowMS
	for _, p := range inserted {
		if p.key == nil {
			continue
		}
		var orig []byte // a content key is its own: the row keeps none
		if p.m.MessageID != "" {
			orig = p.ckey
		}
		args = append(args, p.key, out[p.slot].Seq, orig)
	}
	k := (len(args) - 2) / dedupParams
	if k == 0 {
		return nil
	}
	n := chunkOf(k)
	for range n - k {
		args = append(args, nil, nil, nil)
	}
	if _, err := hotDedups[n].exec(ctx, db, args...); err != nil {
		return interpret("send", err)
	}
	return nil
}

// fromResult is the SendResult of a slot answered from the dedup window.
func fromResult(queue string, r SendResult) SendResult {
	r.Copies = []Copy{{Queue: queue, Seq: r.Seq, Duplicate: r.Duplicate, Err: r.Err}}
	return r
}
