package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

// largeMessage is the size from which Send asks for the store's limit before
// it hashes or binds a message: an oversize body is refused before it costs
// anything, at the price of one more statement for large messages only.
const largeMessage = 64 << 10

// InlineBodyMax is the largest body kept in its message's row. A larger one
// goes to message_bodies, written once: every claim, renewal and settlement
// rewrites the message's row, and would otherwise rewrite the body (and
// every overflow page it spans) into the WAL each time.
const InlineBodyMax = 512

// contentKey is the content key of a body (driver.ContentKey).
var contentKey = driver.ContentKey

// insertMessage enqueues one message in a single statement, or inserts
// nothing: it checks the message's size, its dedup key and the queue's
// shape that the send assumed (queueShape, ?13 to ?15), computes the group
// hold and inserts. A message without a dedup key (?10 NULL: no MessageID,
// no body dedup) is looked up nowhere. Every check sits in the scalar
// subquery of expires_at, the one read of the queue's row: when a check
// fails it is NULL, a NOT NULL column, and OR IGNORE drops the row (no
// other constraint can fail: the id is new and every other column is
// set); diagnose then says why. ?3 is the group the message gets (the
// caller's, the empty one on a FIFO queue, or NULL) and ?9 the body, NULL
// for a body kept in message_bodies. "now" is the store's clock,
// mqlite_now().
//
// It is a one-row VALUES, not an INSERT … SELECT FROM mqlite_queues: a
// SELECT that reads mqlite_messages (the next seq, the group hold) makes
// SQLite copy its row into a temporary b-tree before the insert, and an
// INSERT … SELECT runs under a statement journal, which copies every page
// the insert changes. The one-row VALUES does neither.
const insertMessage = `INSERT OR IGNORE INTO mqlite_messages (id, queue, state, held, visible_at, expires_at, enqueued_at,
	message_id, group_id, subject, properties, content_key, body_len, body, priority)
VALUES (` + nextSeq + `, ?1,
	CASE WHEN ?5 > mqlite_now() THEN 'scheduled' ELSE 'active' END,
	?3 IS NOT NULL AND EXISTS (SELECT 1 FROM mqlite_messages b WHERE b.queue = ?1 AND b.` + live + ` AND b.group_id = ?3),
	max(?5, mqlite_now()),
	(SELECT CASE WHEN ?6 > 0 THEN mqlite_now() + ?6
	             WHEN q.default_ttl_ms > 0 THEN mqlite_now() + q.default_ttl_ms
	             ELSE 0 END
	   FROM mqlite_queues q
	  WHERE q.name = ?1 AND ?11 <= mqlite_max_message_bytes()
	    AND q.ordering = ?13 AND q.dedup_window_ms = ?14 AND q.dedup_by_body = ?15
	    AND NOT EXISTS (SELECT 1 FROM mqlite_dedup d WHERE d.queue = ?1 AND d.key = ?10 AND d.expires_at > mqlite_now())),
	mqlite_now(), ?2, ?3, ?4, ?7, ?8, ?12, ?9, ?16)`

// insertDedup writes the dedup row (?2 key, ?4 content key) of the message
// ?3 just sent to the queue ?1 with a window of ?5 ms: it expires a window
// after the message's enqueued_at. A row of the same key may still be there,
// expired (the janitor has not deleted it yet): the new one replaces it.
const insertDedup = `INSERT OR REPLACE INTO mqlite_dedup (queue, key, seq, content_key, expires_at)
	VALUES (?1, ?2, ?3, ?4, (SELECT enqueued_at FROM mqlite_messages WHERE id = ?3) + ?5)`

// insertBody writes the body of a message whose row keeps none.
const insertBody = `INSERT INTO mqlite_message_bodies (id, body) VALUES (?, ?)`

// The hot statements of a send (hot.go).
var (
	hotInsertMessage = hot(insertMessage)
	hotInsertDedup   = hot(insertDedup)
	hotInsertBody    = hot(insertBody)
)

// dedupKey is the dedup key of a message: its MessageID as TEXT, or its
// content key (contentKey) as a BLOB when it has none. The two kinds never meet:
// SQLite never finds a TEXT equal to a BLOB (the dedup table's key is ANY).
// Whether a content key counts depends on the queue (dedup_by_body).
func dedupKey(messageID string, hash []byte) any {
	if messageID != "" {
		return messageID
	}
	return hash
}

// Send enqueues msgs on db, which is normally the caller's transaction,
// into the queue name, or into every matching subscription of the topic
// name (see publish). A slot that fails (dedup conflict) gets Seq 0 and its
// own Err while the other slots go on. Errors that concern the whole call
// (an unknown queue or topic, a body over the limit) are found before
// anything is written; a driver failure mid-way leaves the transaction for
// the caller to roll back.
func Send(ctx context.Context, db DBTX, name string, msgs []SendMessage) ([]SendResult, error) {
	if err := checkDeliverAt(ctx, db, msgs); err != nil {
		return nil, err
	}
	if len(msgs) > 1 || msgs[0].Size() >= largeMessage {
		// One statement writes one message or nothing; a batch checks the
		// target and every size first, so a whole-call error writes
		// nothing. A large single message is checked first too, so that an
		// oversize one is refused before it is hashed and bound.
		t, err := precheck(ctx, db, name, msgs)
		if err != nil {
			return nil, err
		}
		if t.topic {
			return publish(ctx, db, name, msgs)
		}
		if len(msgs) > 1 {
			return sendBatch(ctx, db, name, t, msgs)
		}
	}
	// One message: its single statement writes it or nothing.
	c, err := insert(ctx, db, name, msgs[0], contentKey(msgs[0].Body))
	if errors.As(err, new(noQueueError)) {
		// Not a queue: a topic, or nothing. Nothing was written, so the
		// message can go to the topic.
		ok, terr := isTopic(ctx, db, name)
		if terr != nil {
			return nil, terr
		}
		if ok {
			return publish(ctx, db, name, msgs)
		}
	}
	if err != nil {
		return nil, err
	}
	return []SendResult{{Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Err, Copies: []Copy{c}}}, nil
}

// checkDeliverAt refuses a DeliverAt more than MaxDelay after the store's
// now, before anything is written. Only a send with a DeliverAt asks the
// clock.
func checkDeliverAt(ctx context.Context, db DBTX, msgs []SendMessage) error {
	var latest int64
	for _, m := range msgs {
		latest = max(latest, m.DeliverAt)
	}
	if latest == 0 {
		return nil
	}
	var now int64
	if err := db.QueryRowContext(ctx, `SELECT mqlite_now()`).Scan(&now); err != nil {
		return interpret("send", err)
	}
	for i, m := range msgs {
		if m.DeliverAt-now > MaxDelay.Milliseconds() {
			err := errs.Invalidf(errs.ErrInvalidMessage, "DeliverAt %s is more than %v ahead",
				time.UnixMilli(m.DeliverAt).UTC().Format(time.RFC3339), MaxDelay)
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return err
		}
	}
	return nil
}

// noQueueError is the error of insert into a queue that does not exist:
// errs.ErrQueueNotFound with the queue's name, said once.
type noQueueError struct{ queue string }

func (e noQueueError) Error() string { return fmt.Sprintf("%s: %q", errs.ErrQueueNotFound, e.queue) }
func (e noQueueError) Unwrap() error { return errs.ErrQueueNotFound }

// insert writes m, whose content key is ckey, into queue in one statement
// (one more for its dedup row, one more for a body kept out of the row)
// and reports the copy: new, a duplicate of a message inside the dedup
// window, or a conflict. It assumes the shape the queue had at its last
// send (shapes); when the queue has another, nothing was inserted, and it
// tries again with the queue's real shape. An unknown queue is a
// noQueueError.
func insert(ctx context.Context, db DBTX, queue string, m SendMessage, ckey []byte) (Copy, error) {
	shape := shapes.get(queue)
	for try := 0; ; try++ {
		r := newRow(queue, m, ckey, shape)
		n, seq, err := insertOne(ctx, db, r)
		if err != nil {
			return Copy{}, err
		}
		if n == 1 {
			return Copy{Queue: queue, Seq: seq}, nil
		}
		d, err := diagnose(ctx, db, queue, r.key, m.Size())
		if err != nil {
			return Copy{}, err
		}
		if d.shape != shape && try == 0 {
			// The transaction holds the write lock: no one changes the
			// queue before the second try.
			shapes.put(queue, d.shape)
			shape = d.shape
			continue
		}
		if r.key == nil || !d.seq.Valid {
			return Copy{}, fmt.Errorf("send: insert returned no row for an unexplained reason")
		}
		res := dedupResult(d.seq.Int64, d.origKey, ckey)
		return Copy{Queue: queue, Seq: res.Seq, Duplicate: res.Duplicate, Err: res.Err}, nil
	}
}

// queueShape is what a single send assumes of its queue: the settings that
// decide the message's group (FIFO ordering), whether it has a dedup key
// and when its dedup row expires. insertMessage checks the assumption in
// the queue's row, which it reads anyway, and inserts nothing when it is
// wrong; so the statement reads the queue once where computing these
// would read it in three scalar subqueries.
type queueShape struct {
	fifo     bool
	windowMS int64 // the dedup window; 0 = off
	byBody   bool  // dedup_by_body, whatever the window
}

// maxShapes bounds the queue names shapes remembers.
const maxShapes = 1024

// shapes holds the shape each queue name had at its last send, for the
// next send to assume. It is process-wide: a wrong guess (a queue just
// created or changed, or two stores with queues of one name and different
// settings) costs a send one more statement and a second try, never a
// wrong row. Safe for concurrent use.
var shapes = shapeCache{m: map[string]queueShape{}}

type shapeCache struct {
	mu sync.RWMutex
	m  map[string]queueShape
}

// get returns the shape queue had at its last send; an unknown queue is
// assumed standard, without dedup.
func (c *shapeCache) get(queue string) queueShape {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[queue]
}

// put remembers the shape of queue; past maxShapes names it forgets the
// others first.
func (c *shapeCache) put(queue string, s queueShape) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[queue]; !ok && len(c.m) >= maxShapes {
		clear(c.m)
	}
	c.m[queue] = s
}

// oneRow is what insertOne writes: m into queue of the assumed shape, with
// its group (nil: none), its content key, its dedup key (nil: none) and
// its body as bound (nil: kept out of the row).
type oneRow struct {
	queue            string
	shape            queueShape
	m                SendMessage
	ckey             []byte
	group, key, body any
}

// newRow is the row of m in queue, assumed of the given shape. The message
// has a dedup key when it has a MessageID, or when the queue deduplicates
// bodies inside a window; on a FIFO queue, a message without a GroupID is
// in the empty group.
func newRow(queue string, m SendMessage, ckey []byte, shape queueShape) oneRow {
	r := oneRow{queue: queue, shape: shape, m: m, ckey: ckey, group: nullString(m.GroupID), body: m.Body}
	if m.GroupID == "" && shape.fifo {
		r.group = ""
	}
	if m.MessageID != "" || shape.byBody && shape.windowMS > 0 {
		r.key = dedupKey(m.MessageID, ckey)
	}
	switch {
	case len(m.Body) > InlineBodyMax:
		r.body = nil
	case m.Body == nil:
		r.body = []byte{}
	}
	return r
}

// insertOne runs insertMessage, and the writes that go with the row it
// inserted: its dedup row (a dedup key and a window) and its body kept out
// of the row. It returns the rows inserted (0 or 1) and the message's seq.
func insertOne(ctx context.Context, db DBTX, r oneRow) (int64, int64, error) {
	m, queue := r.m, r.queue
	ordering := "standard"
	if r.shape.fifo {
		ordering = "fifo"
	}
	res, err := hotInsertMessage.exec(ctx, db, queue, nullString(m.MessageID), r.group,
		nullString(m.Subject), m.DeliverAt, m.TTLMS, nullString(m.Properties), r.ckey, r.body, r.key, m.Size(), len(m.Body),
		ordering, r.shape.windowMS, r.shape.byBody, m.Priority)
	if err != nil || res.rows == 0 {
		return 0, 0, interpret("send", err)
	}
	seq := res.id
	if r.key != nil && r.shape.windowMS > 0 {
		var orig []byte // a content key is its own: the row keeps none
		if m.MessageID != "" {
			orig = r.ckey
		}
		if _, err := hotInsertDedup.exec(ctx, db, queue, r.key, seq, orig, r.shape.windowMS); err != nil {
			return 0, 0, interpret("send", err)
		}
	}
	if r.body == nil {
		if _, err := hotInsertBody.exec(ctx, db, seq, m.Body); err != nil {
			return 0, 0, interpret("send", err)
		}
	}
	return 1, seq, nil
}

// target is what precheck learns of a send's target.
type target struct {
	topic    bool  // the name is a topic
	fifo     bool  // a queue with FIFO ordering
	windowMS int64 // the queue's dedup window; 0 = off
	byBody   bool  // the queue deduplicates messages without a MessageID by body
}

// precheck returns the error that stops a whole batch (an unknown target or
// a body over the limit) and what the batch path needs of the target.
func precheck(ctx context.Context, db DBTX, name string, msgs []SendMessage) (target, error) {
	var t target
	var queue bool
	var maxBytes int64
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM mqlite_queues WHERE name = ?1),
		EXISTS (SELECT 1 FROM mqlite_topics WHERE name = ?1), mqlite_max_message_bytes(),
		coalesce((SELECT ordering = 'fifo' FROM mqlite_queues WHERE name = ?1), 0),
		coalesce((SELECT dedup_window_ms FROM mqlite_queues WHERE name = ?1), 0),
		coalesce((SELECT dedup_by_body FROM mqlite_queues WHERE name = ?1), 0)`, name).
		Scan(&queue, &t.topic, &maxBytes, &t.fifo, &t.windowMS, &t.byBody); err != nil {
		return t, interpret("send", err)
	}
	if !queue && !t.topic {
		return t, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	for i, m := range msgs {
		if m.Size() > maxBytes {
			err := fmt.Errorf("%w: %d bytes with its metadata, the limit is %d", errs.ErrMessageTooLarge, m.Size(), maxBytes)
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return t, err
		}
	}
	return t, nil
}

// diagnosis is what diagnose learns of an insert that wrote no row: the
// queue's shape, and the live dedup row of the message's key (seq NULL:
// none) with its content key.
type diagnosis struct {
	shape   queueShape
	seq     sql.NullInt64
	origKey []byte
}

// diagnose explains an insert that wrote no row: an unknown queue or a
// body over the limit (errors), or else the queue's real shape and the
// live dedup row of key (nil: none looked up) for the caller to judge.
func diagnose(ctx context.Context, db DBTX, queue string, key any, size int64) (diagnosis, error) {
	var d diagnosis
	var maxBytes int64
	err := db.QueryRowContext(ctx, `SELECT q.ordering = 'fifo', q.dedup_window_ms, q.dedup_by_body,
		mqlite_max_message_bytes(),
		(SELECT seq FROM mqlite_dedup WHERE queue = ?1 AND key = ?2 AND expires_at > mqlite_now()),
		(SELECT content_key FROM mqlite_dedup WHERE queue = ?1 AND key = ?2 AND expires_at > mqlite_now())
		FROM mqlite_queues q WHERE q.name = ?1`,
		queue, key).Scan(&d.shape.fifo, &d.shape.windowMS, &d.shape.byBody, &maxBytes, &d.seq, &d.origKey)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return d, noQueueError{queue}
	case err != nil:
		return d, interpret("send", err)
	case size > maxBytes:
		return d, fmt.Errorf("%w: %d bytes with its metadata, the limit is %d", errs.ErrMessageTooLarge, size, maxBytes)
	}
	return d, nil
}

// dedupResult is the outcome of a send whose key matched a live dedup row
// (seq, origKey): a duplicate when the bodies agree, a conflict when they
// differ. A row keyed by content has no origKey: its key is the content.
func dedupResult(seq int64, origKey, ckey []byte) SendResult {
	if origKey != nil && string(origKey) != string(ckey) {
		return SendResult{Err: fmt.Errorf("%w: the message id is seq %d", errs.ErrDuplicateConflict, seq)}
	}
	return SendResult{Seq: seq, Duplicate: true}
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// interpret translates driver errors into mqlite's errors; it is the one
// place that reads SQLite's error text.
func interpret(op string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case errors.Is(err, errs.ErrClosed) || strings.Contains(msg, errs.ErrClosed.Error()):
		// mqlite_now() refused: the store closed under the transaction.
		return fmt.Errorf("%s: %w", op, errs.ErrClosed)
	case strings.Contains(msg, "no such function: mqlite_"):
		return fmt.Errorf("%s: %w", op, errs.ErrNotAStore)
	case strings.Contains(msg, "no such table: mqlite_queues"), strings.Contains(msg, "no such table: mqlite_messages"):
		return fmt.Errorf("%s: %w: the database has no mqlite schema", op, errs.ErrNotAStore)
	}
	return fmt.Errorf("%s: %w", op, err)
}
