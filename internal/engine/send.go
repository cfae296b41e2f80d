package engine

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/mqlite/mqlite/internal/errs"
)

// OutMessage is one message to enqueue, already validated.
type OutMessage struct {
	Body       []byte
	MessageID  string            // "" = none
	GroupID    string            // "" = none
	Subject    string            // "" = none
	Properties string            // JSON object, "" = none
	Props      map[string]string // the same, for subscription filters
	DeliverAt  int64             // epoch ms; 0 = now
	TTLMS      int64             // 0 = the queue's default
}

// size is what the message counts against the store's MaxMessageBytes: its
// body and its metadata.
func (m OutMessage) size() int64 {
	return int64(len(m.Body) + len(m.MessageID) + len(m.GroupID) + len(m.Subject) + len(m.Properties))
}

// largeMessage is the size from which Send asks for the store's limit before
// it hashes or binds a message: an oversize body is refused before it costs
// anything, at the price of one more statement for large messages only.
const largeMessage = 64 << 10

// SendResult is the outcome of one message of a send.
type SendResult struct {
	Seq       int64
	Duplicate bool // the message matched a dedup row; Seq is the original's
	Err       error
	Copies    []Copy // every queue's row: one for a queue, one per matching subscription
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
WHERE q.name = ?1 AND ?11 <= mqlite_max_message_bytes()
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

// Copy is one row a send wrote (or found, for a duplicate) in one queue: a
// send to a queue has one, a send to a topic one per matching subscription.
type Copy struct {
	Queue     string
	Seq       int64
	Duplicate bool
	Err       error // this copy's own error (a dedup conflict)
}

// Send enqueues msgs on db, which is normally the caller's transaction,
// into the queue name, or into every matching subscription of the topic
// name (see publish). A slot that fails (dedup conflict) gets Seq 0 and its
// own Err while the other slots go on. Errors that concern the whole call
// (an unknown queue or topic, a body over the limit) are found before
// anything is written; a driver failure mid-way leaves the transaction for
// the caller to roll back.
func Send(ctx context.Context, db DBTX, name string, msgs []OutMessage) ([]SendResult, error) {
	if len(msgs) > 1 || msgs[0].size() >= largeMessage {
		// One statement writes one message or nothing; a batch checks the
		// target and every size first, so a whole-call error writes
		// nothing. A large single message is checked first too, so that an
		// oversize one is refused before it is hashed and bound.
		topic, err := precheck(ctx, db, name, msgs)
		if err != nil {
			return nil, err
		}
		if topic {
			return publish(ctx, db, name, msgs)
		}
	}
	out := make([]SendResult, len(msgs))
	for i, m := range msgs {
		c, err := insert(ctx, db, name, m, sha256.Sum256(m.Body))
		if errors.Is(err, errNoQueue) && len(msgs) == 1 {
			// Not a queue: a topic, or nothing. The single statement
			// wrote nothing, so the message can go to the topic.
			if ok, terr := isTopic(ctx, db, name); terr != nil || ok {
				if terr != nil {
					return nil, terr
				}
				return publish(ctx, db, name, msgs)
			}
		}
		if err != nil {
			return nil, err
		}
		out[i] = SendResult{Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Err, Copies: []Copy{c}}
	}
	return out, nil
}

// errNoQueue is the error of insert into a queue that does not exist.
var errNoQueue = errors.New("no such queue")

// insert writes m, whose body hashes to sum, into queue in one statement
// and reports the copy: new, a duplicate of a message inside the dedup
// window, or a conflict. An unknown queue is errNoQueue wrapped with
// errs.ErrQueueNotFound.
func insert(ctx context.Context, db DBTX, queue string, m OutMessage, sum [sha256.Size]byte) (Copy, error) {
	key := dedupKey(m.MessageID, sum[:])
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	res, err := db.ExecContext(ctx, insertMessage, queue, nullString(m.MessageID), nullString(m.GroupID),
		nullString(m.Subject), m.DeliverAt, m.TTLMS, nullString(m.Properties), sum[:], body, key, m.size())
	if err != nil {
		return Copy{}, interpret("send", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Copy{}, interpret("send", err)
	}
	if n == 1 {
		// The trigger's insert into dedup does not change the statement's
		// last rowid: it is the message's.
		seq, err := res.LastInsertId()
		return Copy{Queue: queue, Seq: seq}, interpret("send", err)
	}
	r, err := diagnose(ctx, db, queue, key, sum[:], m.size())
	return Copy{Queue: queue, Seq: r.Seq, Duplicate: r.Duplicate, Err: r.Err}, err
}

// precheck returns the error that stops a whole batch: an unknown target or
// a body over the limit. topic reports that name is a topic.
func precheck(ctx context.Context, db DBTX, name string, msgs []OutMessage) (topic bool, err error) {
	var queue bool
	var maxBytes int64
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM queues WHERE name = ?1),
		EXISTS (SELECT 1 FROM topics WHERE name = ?1), mqlite_max_message_bytes()`, name).
		Scan(&queue, &topic, &maxBytes); err != nil {
		return false, interpret("send", err)
	}
	if !queue && !topic {
		return false, fmt.Errorf("%w: %q", errs.ErrQueueNotFound, name)
	}
	for i, m := range msgs {
		if m.size() > maxBytes {
			err := fmt.Errorf("%w: %d bytes with its metadata, the limit is %d", errs.ErrMessageTooLarge, m.size(), maxBytes)
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return false, err
		}
	}
	return topic, nil
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
		return SendResult{}, fmt.Errorf("%w: %q: %w", errs.ErrQueueNotFound, queue, errNoQueue)
	case size > maxBytes:
		return SendResult{}, fmt.Errorf("%w: %d bytes with its metadata, the limit is %d", errs.ErrMessageTooLarge, size, maxBytes)
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
	case errors.Is(err, errs.ErrClosed) || strings.Contains(msg, errs.ErrClosed.Error()):
		// mqlite_now() refused: the store closed under the transaction.
		return fmt.Errorf("%s: %w", op, errs.ErrClosed)
	case strings.Contains(msg, "no such function: mqlite_"):
		return fmt.Errorf("%s: %w", op, errs.ErrNotAStore)
	case strings.Contains(msg, "no such table: queues"), strings.Contains(msg, "no such table: messages"):
		return fmt.Errorf("%s: %w: the database has no mqlite schema", op, errs.ErrNotAStore)
	}
	return fmt.Errorf("%s: %w", op, err)
}
