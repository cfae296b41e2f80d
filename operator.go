package mqlite

import (
	"context"
	"database/sql"
	"time"

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

// PeekDeadLetters returns the dead letters of queue in sequence order, with
// why (DeadLetterReason, DeadLetterDescription), when (DeadLetteredAt) and
// after how many deliveries (DeliveryCount) each was dead-lettered.
func (s *Store) PeekDeadLetters(ctx context.Context, queue string, opts PeekParams) ([]Message, error) {
	return s.peek(ctx, queue, opts, driver.Executor.PeekDeadLetters)
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

// RedriveOptions configures Redrive.
type RedriveOptions struct {
	// Seqs are the dead letters to bring back. Empty means all of the
	// queue's dead letters.
	Seqs []int64
}

// Redrive puts dead letters of queue back to active: their delivery count
// starts again at zero and the dead-letter reason, description and time are
// cleared. A message whose time to live has passed comes back without one.
// A grouped message rejoins its group in sequence order but never overtakes
// a member in flight (locked, deferred or scheduled): it waits behind it and
// goes next once that one is settled or back to active, so a group still
// has one message out at a time. It returns how many
// messages came back; listed seqs that are not dead letters of the queue are
// skipped. It runs in one transaction and blocks other statements of the
// store while it runs.
func (s *Store) Redrive(ctx context.Context, queue string, opts RedriveOptions) (int, error) {
	if err := s.checkSeqs(ctx, queue, opts.Seqs); err != nil {
		return 0, err
	}
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.catchUp(ctx, tx, queue); err != nil {
			return err
		}
		var err error
		n, err = s.eng.Redrive(ctx, tx, queue, opts.Seqs, s.now())
		return err
	})
	return int(n), err
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

// PurgeOptions configures Purge.
type PurgeOptions struct {
	// State is the state of the messages to remove: StateActive,
	// StateScheduled, StateDeferred, StateDeadLettered or StateLocked.
	// Purging locked messages takes them from under their consumers, whose
	// settlements then fail with ErrLockLost. Required.
	State State
	// Seqs, when set, are the messages to remove: only those of them in
	// State go (the others are skipped), in one transaction; an operator
	// purges the dead letters it selected this way. Empty means every
	// message of the queue in State.
	Seqs []int64
}

// Purge removes every message of queue in opts.State and returns how many it
// removed. It deletes in batches of a few hundred, each its own transaction,
// so sends and receives go on between them; cancelling ctx stops it between
// batches (the count so far is returned with ctx's error). An unknown state
// is ErrInvalidArgument, an unknown queue ErrQueueNotFound.
func (s *Store) Purge(ctx context.Context, queue string, opts PurgeOptions) (int, error) {
	switch opts.State {
	case StateActive, StateScheduled, StateLocked, StateDeferred, StateDeadLettered:
	default:
		return 0, invalidf(ErrInvalidArgument, "purge state %q, want one of active, scheduled, locked, deferred, dead_lettered", opts.State)
	}
	if err := s.checkSeqs(ctx, queue, opts.Seqs); err != nil {
		return 0, err
	}
	if len(opts.Seqs) > 0 {
		var n int64
		err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.catchUp(ctx, tx, queue); err != nil {
				return err
			}
			var err error
			n, err = s.eng.PurgeSeqs(ctx, tx, queue, string(opts.State), opts.Seqs)
			return err
		})
		return int(n), err
	}
	var total int64
	for {
		var n int64
		err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.catchUp(ctx, tx, queue); err != nil {
				return err
			}
			var err error
			n, err = s.eng.PurgeBatch(ctx, tx, queue, string(opts.State))
			return err
		})
		total += n
		if err != nil {
			return int(total), err
		}
		if n < driver.SweepBatch {
			return int(total), nil
		}
	}
}

// QueueStats is a snapshot of one queue.
type QueueStats struct {
	Queue string
	// Messages per state.
	Active, Scheduled, Locked, Deferred, DeadLettered int64
	// Bytes is the sum of the body lengths of every message, dead letters
	// included; DeadLetterBytes is the dead letters' share.
	Bytes, DeadLetterBytes int64
	// OldestAge is how long ago (by the store's Clock) the oldest message
	// that is not dead-lettered was sent; 0 when there is none.
	OldestAge time.Duration
	// OldestDeadLetterAge is how long ago the oldest dead letter was
	// dead-lettered; 0 when there is none.
	OldestDeadLetterAge time.Duration
	// Counters are the queue's events since the store was opened; see
	// Store.Metrics. They are kept in memory, not read from the file.
	Counters QueueCounters
	// Receivers are the queue's live receivers (Store.Receivers), kept in
	// memory.
	Receivers []Receiver
}

// Total is the number of messages in the queue, dead letters included.
func (q QueueStats) Total() int64 {
	return q.Active + q.Scheduled + q.Locked + q.Deferred + q.DeadLettered
}

// Stats counts the messages of queue per state, with their bytes and the
// age of the oldest. It reads the queue's entries of the state indexes (no
// other queue's, no body), so its cost grows with the queue asked about, not
// with the file; on a large queue it still holds the store's connection for
// a while: it is for operators and dashboards, not for every request.
func (s *Store) Stats(ctx context.Context, queue string) (QueueStats, error) {
	if err := s.checkQueue(ctx, queue); err != nil {
		return QueueStats{}, err
	}
	var per map[string]driver.StateStats
	var now int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.catchUp(ctx, tx, queue); err != nil {
			return err
		}
		var err error
		per, err = s.eng.Stats(ctx, tx, queue)
		if err == nil {
			s.tally.Correct(queue, exactOf(per))
		}
		now = s.now()
		return err
	})
	if err != nil {
		return QueueStats{}, err
	}
	age := func(ms int64) time.Duration {
		if ms == 0 || ms > now {
			return 0
		}
		return time.Duration(now-ms) * time.Millisecond
	}
	st := QueueStats{Queue: queue, Counters: QueueCounters(s.tally.Counters(queue)), Receivers: receiversOf(s.listReceivers(), queue)}
	var oldest int64
	for state, v := range per {
		st.Bytes += v.Bytes
		switch State(state) {
		case StateActive:
			st.Active = v.Count
		case StateScheduled:
			st.Scheduled = v.Count
		case StateLocked:
			st.Locked = v.Count
		case StateDeferred:
			st.Deferred = v.Count
		case StateDeadLettered:
			st.DeadLettered, st.DeadLetterBytes = v.Count, v.Bytes
			st.OldestDeadLetterAge = age(v.OldestDead)
			continue
		}
		if oldest == 0 || (v.OldestEnq > 0 && v.OldestEnq < oldest) {
			oldest = v.OldestEnq
		}
	}
	st.OldestAge = age(oldest)
	return st, nil
}

// catchUp brings the queue's rows to the store's "now" inside tx: due
// scheduled messages become active, lapsed leases end (dead-lettered on the
// last allowed delivery), exactly as the next claim would. The operator
// calls (Peek, Stats, Redrive, Purge) see and act on that state, not on one
// that waits for the next Receive or sweep.
func (s *Store) catchUp(ctx context.Context, tx *sql.Tx, queue string) error {
	q, err := s.queues.get(ctx, tx, queue)
	if err != nil {
		return err
	}
	return s.eng.MakeClaimable(ctx, tx, q, s.now())
}

// checkSeqs checks an operator call's queue (checkQueue) and its listed
// sequence numbers.
func (s *Store) checkSeqs(ctx context.Context, queue string, seqs []int64) error {
	if err := s.checkQueue(ctx, queue); err != nil {
		return err
	}
	for _, seq := range seqs {
		if seq <= 0 {
			return invalidf(ErrInvalidArgument, "seq %d", seq)
		}
	}
	return nil
}

// checkQueue validates queue and checks that it exists.
func (s *Store) checkQueue(ctx context.Context, queue string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateQueueName(queue); err != nil {
		return err
	}
	_, err := s.queues.get(ctx, s.db, queue)
	return err
}
