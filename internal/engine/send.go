package engine

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
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
// no row comes back, diagnose says why. "now" is read once through the
// materialized CTE, from the store's clock.
const insertMessage = `WITH n(now, maxb) AS MATERIALIZED (SELECT mqlite_now(), mqlite_max_message_bytes()),
g(q, gid) AS MATERIALIZED (
	SELECT name, coalesce(?3, CASE WHEN ordering = 'fifo' THEN '' END) FROM queues WHERE name = ?1)
INSERT INTO messages (queue, state, held, visible_at, expires_at, enqueued_at,
	message_id, group_id, subject, properties, body_hash, body)
SELECT g.q,
	CASE WHEN ?5 > n.now THEN 'scheduled' ELSE 'active' END,
	g.gid IS NOT NULL AND EXISTS (SELECT 1 FROM messages b
		WHERE b.queue = g.q AND b.group_id = g.gid AND b.state <> 'dead_lettered'),
	max(?5, n.now),
	CASE WHEN ?6 > 0 THEN n.now + ?6
	     WHEN (SELECT default_ttl_ms FROM queues WHERE name = ?1) > 0
	     THEN n.now + (SELECT default_ttl_ms FROM queues WHERE name = ?1)
	     ELSE 0 END,
	n.now, ?2, g.gid, ?4, ?7, ?8, ?9
FROM g, n
WHERE length(?9) <= n.maxb
  AND NOT EXISTS (SELECT 1 FROM dedup d WHERE d.queue = g.q AND d.key = ?10 AND d.expires_at > n.now)
RETURNING id`

// DedupKey is the dedup key of a message: its MessageID, or the body's
// SHA-256 when it has none. hash is the body's SHA-256.
func DedupKey(messageID string, hash []byte) string {
	if messageID != "" {
		return messageID
	}
	return "sha256:" + hex.EncodeToString(hash)
}

// Send enqueues msgs on db, which is normally the caller's transaction. A
// slot that fails (dedup conflict) gets Seq 0 and its own Err while the
// other slots go on; errors that stop the whole send (unknown queue, a
// driver failure) are returned as err.
func Send(ctx context.Context, db DBTX, queue string, msgs []OutMessage) ([]SendResult, error) {
	out := make([]SendResult, len(msgs))
	run := func(args ...any) *sql.Row { return db.QueryRowContext(ctx, insertMessage, args...) }
	if len(msgs) > 1 {
		if p, ok := db.(interface {
			PrepareContext(context.Context, string) (*sql.Stmt, error)
		}); ok {
			s, err := p.PrepareContext(ctx, insertMessage)
			if err != nil {
				return nil, interpret("prepare send", err)
			}
			defer s.Close()
			run = func(args ...any) *sql.Row { return s.QueryRowContext(ctx, args...) }
		}
	}
	for i, m := range msgs {
		sum := sha256.Sum256(m.Body)
		key := DedupKey(m.MessageID, sum[:])
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		var seq int64
		err := run(queue, nullString(m.MessageID), nullString(m.GroupID),
			nullString(m.Subject), m.DeliverAt, m.TTLMS, nullString(m.Properties), sum[:], body, key).Scan(&seq)
		if err == nil {
			out[i].Seq = seq
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, interpret("send", err)
		}
		r, err := diagnose(ctx, db, queue, key, sum[:], int64(len(body)))
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// diagnose explains an insert that returned no row: an unknown queue, a body
// over the limit, a duplicate (replay) or a conflict.
func diagnose(ctx context.Context, db DBTX, queue, key string, hash []byte, size int64) (SendResult, error) {
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
		return SendResult{Err: fmt.Errorf("%w: key %q is seq %d", errs.ErrDuplicateConflict, key, seq.Int64)}, nil
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
