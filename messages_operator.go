package mqlite

import (
	"context"
	"database/sql"

	"github.com/mqlite/mqlite/internal/driver"
)

// PeekParams configures Peek.
type PeekParams struct {
	// FromSeq is the first sequence number to look at. Defaults to 0 (the
	// oldest message).
	FromSeq int64
	// Max is how many messages to return at most. Defaults to 100; at most
	// 1000.
	Max int
	// MaxBytes, when positive, ends the page before the sizes of its
	// messages (body and metadata) add up past it; the first message comes
	// whatever its size. The next page starts after the last message
	// returned. Zero means no bound.
	MaxBytes int64
}

func (o *PeekParams) validate() error {
	var err error
	if o.Max, err = batchMax(o.Max, 100); err != nil {
		return err
	}
	if o.FromSeq < 0 {
		return invalidf(ErrInvalidArgument, "negative FromSeq")
	}
	if o.MaxBytes < 0 {
		return invalidf(ErrInvalidArgument, "negative MaxBytes")
	}
	return nil
}

// Peek returns messages of queue in sequence order, the live ones
// (active, scheduled, locked, deferred; never a dead letter or a completed
// message), without locking or counting a delivery. It reads the queue's
// entries in the states' partial indexes and the page's rows, never
// another queue's.
func (s *Store) Peek(ctx context.Context, queue string, opts PeekParams) ([]Message, error) {
	return s.peek(ctx, queue, opts, driver.Executor.Peek)
}

// peekFunc is driver.Executor.Peek or driver.Executor.PeekDeadLetters: a
// method expression, which peek calls on the store's engine.
type peekFunc func(x driver.Executor, ctx context.Context, db driver.DBTX, r driver.PeekRequest) ([]driver.Row, error)

func (s *Store) peek(ctx context.Context, queue string, opts PeekParams, read peekFunc) ([]Message, error) {
	if err := validateQueueName(queue); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var rows []driver.Row
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.catchUp(ctx, tx, queue); err != nil {
			return err
		}
		var err error
		rows, err = read(s.eng, ctx, tx, driver.PeekRequest{Queue: queue, FromSeq: opts.FromSeq, Max: opts.Max, MaxBytes: opts.MaxBytes})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(rows))
	for i, c := range rows {
		out[i] = toMessage(queue, c)
		out[i].State = State(c.State)
		out[i].VisibleAt = fromMillis(c.VisibleAt)
		out[i].LockToken = "" // peek never hands out a token
	}
	return out, nil
}

// DeliverNowOptions configures DeliverNow.
type DeliverNowOptions struct {
	// Seqs are the scheduled messages to make due. Empty means all of the
	// queue's scheduled messages.
	Seqs []int64
}

// DeliverNow makes scheduled messages of queue due now, as if their moment
// had come: a message sent with a DeliverAt or abandoned with a delay is
// claimable at once, and a waiting Receive takes it. A grouped message
// keeps its group's order. It returns how many messages it changed; listed
// seqs that are not scheduled messages of the queue are skipped. It is the
// operator's way out of a message parked far ahead (up to MaxDelay).
func (s *Store) DeliverNow(ctx context.Context, queue string, opts DeliverNowOptions) (int, error) {
	if err := s.checkSeqs(ctx, queue, opts.Seqs); err != nil {
		return 0, err
	}
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = s.eng.DeliverNow(ctx, tx, queue, opts.Seqs, s.now())
		return err
	})
	return int(n), err
}
