// Package outbox writes messages into the caller's own transaction: the
// transactional outbox with no outbox table and no poller. The messages
// commit with the caller's business rows or not at all.
//
// SendOne and SendBatch never begin, commit or roll back, and run no DDL:
// the caller owns the transaction. It must be a transaction on an open
// mqlite Store's connection (Store.DB(), or Store.Tx's tx.SQL()); any other
// gets mqlite.ErrNotAStore. With sqlx pass the *sqlx.Tx itself or tx.Tx;
// with GORM pass the *sql.Tx behind the gorm transaction.
//
// The target is a queue or a topic (Store.CreateTopic): a send to a topic
// writes one copy into each subscription whose filter the message passes,
// all in the caller's transaction, so every copy commits or none does. A
// send that no subscription takes writes nothing and is not an error.
//
// Time comes from the Store's Clock, read inside the statement, so a test
// that moves a fake clock moves the outbox too.
//
// # Tracing
//
// With a tracer provider set globally (otel.SetTracerProvider: SendOne has
// no Store to ask for Config.TracerProvider), SendOne and SendBatch record
// a "send <queue>" span of kind producer, child of ctx's span, and each
// message takes that span's context along in its properties as W3C Trace
// Context ("traceparent", and "tracestate" when there is one), unless the
// caller set a traceparent property of its own or the two would take
// Properties past mqlite.MaxPropertiesBytes. The trace context counts
// against Config.MaxMessageBytes like any property (about 70 bytes).
// Without a provider, tracing is off: nothing is recorded or added, and
// the check costs no allocation.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
	"github.com/mqlite/mqlite/internal/tracing"
)

// Execer is what SendOne and SendBatch need from the caller's transaction.
// *sql.Tx, *sqlx.Tx and *sql.Conn satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Execer = (*sql.Tx)(nil)
	_ Execer = (*sql.Conn)(nil)
)

// Message is one message to send.
type Message struct {
	// Body is the payload. The body and the other fields together are at
	// most the store's Config.MaxMessageBytes (mqlite.ErrMessageTooLarge).
	Body []byte
	// MessageID identifies the message for de-duplication: a resend with the
	// same id inside the queue's DedupWindow returns the original seq and
	// inserts nothing. Empty means the body's SHA-256 is the key (a key of
	// its own kind: no MessageID ever equals it). At most
	// mqlite.MaxMessageIDLen bytes of UTF-8.
	MessageID string
	// GroupID orders the message within its group: no message of a group is
	// handed out while an earlier one of the group is locked, deferred or
	// scheduled. At most mqlite.MaxGroupIDLen bytes of UTF-8.
	GroupID string
	// Subject is a free-form label (a routing key for the relay). At most
	// mqlite.MaxSubjectLen bytes of UTF-8.
	Subject string
	// Properties are application headers: UTF-8 keys and values, at most
	// mqlite.MaxPropertiesBytes in all.
	Properties map[string]string
	// DeliverAt schedules the message: it is not delivered before then. The
	// zero time means now.
	DeliverAt time.Time
	// TTL bounds the message's life: past it the message is never delivered.
	// Zero means the queue's DefaultTTL.
	TTL time.Duration
	// Priority orders the message among the queue's claimable ones: 0
	// (the default) to mqlite.MaxPriority, a claim takes the highest first
	// and, within a priority, the lowest seq. A FIFO group keeps its order:
	// a later member waits for its front, whatever the priorities. A topic
	// gives its copies the message's priority.
	Priority int
}

// Copy is the row one message left in one queue.
type Copy struct {
	// Queue is the queue: the one sent to, or a subscription of the topic
	// sent to.
	Queue string
	// Seq is the copy's sequence number; 0 when Err is set.
	Seq int64
	// Duplicate reports a copy that matched one sent earlier inside the
	// queue's dedup window: Seq is the original's, nothing was inserted.
	Duplicate bool
	// Err is the copy's own error (mqlite.ErrDuplicateConflict).
	Err error
}

// Result is the outcome of one message of SendBatch.
type Result struct {
	// Seq is the message's sequence number; 0 when Err is set.
	Seq int64
	// Duplicate reports that the message matched one sent earlier inside
	// the dedup window; Seq is the original's and nothing was inserted.
	Duplicate bool
	// Err is this slot's own error (mqlite.ErrDuplicateConflict); the other
	// slots are unaffected.
	Err error
	// Copies has the row the message left in each queue: one for a queue;
	// for a topic one per subscription whose filter it passed, in queue
	// name order (Seq, Duplicate and Err above are the first copy's), and
	// none when no subscription took it.
	Copies []Copy
}

// SendOne enqueues msg on queue inside tx and returns its sequence number.
// A resend inside the dedup window returns the original seq; the same
// MessageID with another body is mqlite.ErrDuplicateConflict. An unknown
// queue (or topic) is mqlite.ErrQueueNotFound, a message over the limit
// mqlite.ErrMessageTooLarge. On error nothing is written and tx stays usable.
//
// queue may name a topic: then msg is copied into every subscription whose
// filter it passes, and SendOne returns the seq of the first copy (in queue
// name order), or 0 when no subscription took it; SendBatch's Result.Copies
// lists every copy.
func SendOne(ctx context.Context, tx Execer, queue string, msg Message) (int64, error) {
	res, err := send(ctx, tx, queue, []Message{msg})
	if err != nil {
		return 0, err
	}
	return res[0].Seq, res[0].Err
}

// SendBatch enqueues msgs on queue inside tx, in order. A slot whose
// MessageID conflicts gets Seq 0 and its own Err while the other slots are
// written; errors that concern the whole call (unknown queue, invalid
// message, a body over the limit) are returned as err before any slot is
// written. After a driver failure the caller must roll tx back.
func SendBatch(ctx context.Context, tx Execer, queue string, msgs []Message) ([]Result, error) {
	return send(ctx, tx, queue, msgs)
}

func send(ctx context.Context, tx Execer, queue string, msgs []Message) ([]Result, error) {
	if tx == nil || reflect.ValueOf(tx).Kind() == reflect.Pointer && reflect.ValueOf(tx).IsNil() {
		return nil, mqlite.ErrNilTx
	}
	if queue == "" {
		return nil, errs.Invalidf(errs.ErrInvalidQueueName, "empty name")
	}
	tr := tracing.Tracer(nil)
	if tr == nil || len(msgs) == 0 {
		return enqueue(ctx, tx, queue, msgs)
	}
	ctx, span := startSend(ctx, tr, queue, msgs)
	res, err := enqueue(ctx, tx, queue, withTrace(ctx, msgs))
	endSend(span, res, err)
	return res, err
}

// enqueue is send after the span began.
func enqueue(ctx context.Context, tx Execer, queue string, msgs []Message) ([]Result, error) {
	out := make([]driver.SendMessage, len(msgs))
	for i, m := range msgs {
		om, err := convert(m)
		if err != nil {
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return nil, err
		}
		out[i] = om
	}
	if len(out) == 0 {
		return []Result{}, nil
	}
	sres, err := driver.Of(tx).Enqueue(ctx, tx, queue, out)
	if err != nil {
		return nil, err
	}
	res := make([]Result, len(sres))
	for i, r := range sres {
		res[i] = Result{Seq: r.Seq, Duplicate: r.Duplicate, Err: r.Err, Copies: make([]Copy, len(r.Copies))}
		for j, c := range r.Copies {
			res[i].Copies[j] = Copy{Queue: c.Queue, Seq: c.Seq, Duplicate: c.Duplicate, Err: c.Err}
		}
	}
	return res, nil
}

func convert(m Message) (driver.SendMessage, error) {
	if err := m.Validate(); err != nil {
		return driver.SendMessage{}, err
	}
	om := driver.SendMessage{
		Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID, Subject: m.Subject,
		TTLMS: m.TTL.Milliseconds(), Props: m.Properties, Priority: int64(m.Priority),
	}
	if !m.DeliverAt.IsZero() {
		om.DeliverAt = m.DeliverAt.UnixMilli()
	}
	if len(m.Properties) > 0 {
		b, err := json.Marshal(m.Properties)
		if err != nil {
			return driver.SendMessage{}, errs.Invalidf(errs.ErrInvalidMessage, "Properties: %v", err)
		}
		om.Properties = string(b)
	}
	return om, nil
}

// Validate checks every field of m against its bound (mqlite.MaxMessageIDLen
// and the limits next to it) and refuses text that is not UTF-8, with an
// error matching mqlite.ErrInvalidArgument and the field's own sentinel
// (mqlite.ErrInvalidMessage, mqlite.ErrInvalidTTL): what SendOne refuses
// before it writes anything. A message that passes may still be over a
// store's Config.MaxMessageBytes, or too far ahead (mqlite.MaxDelay): those
// bounds depend on the store. The broker's client checks each message with
// it before a request leaves the process.
func (m Message) Validate() error {
	return driver.Fields{MessageID: m.MessageID, GroupID: m.GroupID, Subject: m.Subject,
		Properties: m.Properties, TTL: m.TTL, Priority: m.Priority}.Validate()
}
