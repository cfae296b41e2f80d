package engine

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strings"

	"github.com/mqlite/mqlite/internal/errs"
)

// OutMessage is one message to enqueue, already validated.
type OutMessage struct {
	Body       []byte
	MessageID  string // "" = none
	GroupID    string // "" = none
	Subject    string // "" = none
	Properties string // JSON object, "" = none
	DeliverAt  int64  // epoch ms; 0 = now
	TTLMS      int64  // 0 = the queue's default
}

// SendResult is the outcome of one message of a send.
type SendResult struct {
	Seq       int64
	Duplicate bool // the message matched a dedup row; Seq is the original's
	Err       error
}

// insertMessage enqueues one message in a single statement: it reads the
// queue, computes the group hold, checks size and dedup, and inserts. The
// trigger trg_dedup_record writes the dedup row in the same statement. When
// no row is inserted, diagnose says why. "now" is the store's clock, read
// through mqlite_now() in a scalar subquery, which SQLite evaluates once per
// statement.
const insertMessage = `INSERT INTO messages (queue, state, held, visible_at, expires_at, enqueued_at,
	message_id, group_id, subject, properties, body_hash, body)
SELECT q.name,
	CASE WHEN ?5 > (SELECT mqlite_now()) THEN 'scheduled' ELSE 'active' END,
	coalesce(?3, CASE WHEN q.ordering = 'fifo' THEN '' END) IS NOT NULL AND EXISTS (
		SELECT 1 FROM messages b WHERE b.queue = ?1 AND b.state <> 'dead_lettered'
		   AND b.group_id = coalesce(?3, CASE WHEN q.ordering = 'fifo' THEN '' END)),
	max(?5, (SELECT mqlite_now())),
	CASE WHEN ?6 > 0 THEN (SELECT mqlite_now()) + ?6
	     WHEN q.default_ttl_ms > 0 THEN (SELECT mqlite_now()) + q.default_ttl_ms
	     ELSE 0 END,
	(SELECT mqlite_now()), ?2, coalesce(?3, CASE WHEN q.ordering = 'fifo' THEN '' END), ?4, ?7, ?8, ?9
FROM queues q
WHERE q.name = ?1 AND length(?9) <= mqlite_max_message_bytes()
  AND NOT EXISTS (SELECT 1 FROM dedup d WHERE d.queue = ?1 AND d.key = ?10 AND d.expires_at > (SELECT mqlite_now()))`

// dedupKey is the dedup key of a message: its MessageID as TEXT, or the
// body's SHA-256 hash as a BLOB when it has none. The two kinds never meet:
// SQLite never finds a TEXT equal to a BLOB (the dedup table's key is ANY).
func dedupKey(messageID string, hash []byte) any {
	if messageID != "" {
		return messageID
	}
	return hash
}

// Send enqueues msgs on db, which is normally the caller's transaction. A
// slot that fails (dedup conflict) gets Seq 0 and its own Err while the
// other slots go on. Errors that concern the whole call (unknown queue, a
// body over the limit) are found before anything is written; a driver
// failure mid-way leaves the transaction for the caller to roll back.
func Send(ctx context.Context, db DBTX, queue string, msgs []OutMessage) ([]SendResult, error) {
	if len(msgs) > 1 {
		// One statement writes one message or nothing; a batch checks the
		// queue and every size first, so a whole-call error writes nothing.
		if err := precheck(ctx, db, queue, msgs); err != nil {
			return nil, err
		}
	}
	out := make([]SendResult, len(msgs))
	for i, m := range msgs {
		sum := sha256.Sum256(m.Body)
		key := dedupKey(m.MessageID, sum[:])
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		res, err := db.ExecContext(ctx, insertMessage, queue, nullString(m.MessageID), nullString(m.GroupID),
			nullString(m.Subject), m.DeliverAt, m.TTLMS, nullString(m.Properties), sum[:], body, key)
		if err != nil {
			return nil, interpret("send", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, interpret("send", err)
		} else if n == 1 {
			// The trigger's insert into dedup does not change the
			// statement's last rowid: it is the message's.
			if out[i].Seq, err = res.LastInsertId(); err != nil {
				return nil, interpret("send", err)
			}
			continue
		}
		if out[i], err = diagnose(ctx, db, queue, key, sum[:], int64(len(body))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// precheck returns the error that stops a whole batch: an unknown queue or
// a body over the limit.
func precheck(ctx context.Context, db DBTX, queue string, msgs []OutMessage) error {
	var exists bool
	var maxBytes int64
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM queues WHERE name = ?),
		mqlite_max_message_bytes()`, queue).Scan(&exists, &maxBytes); err != nil {
		return interpret("send", err)
	}
	if !exists {
		return fmt.Errorf("%w: %q", errs.ErrQueueNotFound, queue)
	}
	for i, m := range msgs {
		if int64(len(m.Body)) > maxBytes {
			return fmt.Errorf("message %d: %w: %d bytes, the limit is %d", i, errs.ErrMessageTooLarge, len(m.Body), maxBytes)
		}
	}
	return nil
}

// diagnose explains an insert that wrote no row: an unknown queue, a body
// over the limit, a duplicate (replay) or a conflict.
func diagnose(ctx context.Context, db DBTX, queue string, key any, hash []byte, size int64) (SendResult, error) {
	var exists bool
	var maxBytes int64
	var seq sql.NullInt64
	var origHash []byte
	err := db.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM queues WHERE name = ?1), mqlite_max_message_bytes(),
		(SELECT seq FROM dedup WHERE queue = ?1 AND key = ?2 AND expires_at > mqlite_now()),
		(SELECT body_hash FROM dedup WHERE queue = ?1 AND key = ?2 AND expires_at > mqlite_now())`,
		queue, key).Scan(&exists, &maxBytes, &seq, &origHash)
	if err != nil {
		return SendResult{}, interpret("send", err)
	}
	switch {
	case !exists:
		return SendResult{}, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, queue)
	case size > maxBytes:
		return SendResult{}, fmt.Errorf("%w: %d bytes, the limit is %d", errs.ErrMessageTooLarge, size, maxBytes)
	case !seq.Valid:
		return SendResult{}, fmt.Errorf("send: insert returned no row for an unexplained reason")
	case string(origHash) != string(hash):
		return SendResult{Err: fmt.Errorf("%w: the message id is seq %d", errs.ErrDuplicateConflict, seq.Int64)}, nil
	default:
		return SendResult{Seq: seq.Int64, Duplicate: true}, nil
	}
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
	case strings.Contains(msg, "no such function: mqlite_"):
		return fmt.Errorf("%s: %w", op, errs.ErrNotAStore)
	case strings.Contains(msg, "no such table: queues"), strings.Contains(msg, "no such table: messages"):
		return fmt.Errorf("%s: %w: the database has no mqlite schema", op, errs.ErrNotAStore)
	}
	return fmt.Errorf("%s: %w", op, err)
}
