package mqlite

import (
	"context"
	"time"

	"github.com/mqlite/mqlite/internal/engine"
)

// QueueInfo describes a queue: its resolved options (defaults filled in) and
// when it was created and last changed.
type QueueInfo struct {
	Name      string
	Options   QueueOptions
	CreatedAt time.Time
	UpdatedAt time.Time
}

func queueInfo(q engine.Queue) QueueInfo {
	return QueueInfo{Name: q.Name, Options: queueOptions(q),
		CreatedAt: fromMillis(q.CreatedAt), UpdatedAt: fromMillis(q.UpdatedAt)}
}

// CreateQueue creates the queue name with opts. A bad option is a typed
// error matching both ErrInvalidArgument and the field's sentinel; an
// existing name is ErrQueueExists. Nothing is written on error.
func (s *Store) CreateQueue(ctx context.Context, name string, opts QueueOptions) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	q, err := resolveQueue(name, opts)
	if err != nil {
		return err
	}
	defer s.queues.forget(name)
	return engine.CreateQueue(ctx, s.db, q, s.now())
}

// UpdateQueue replaces the options of an existing queue; zero values mean
// the defaults, as in CreateQueue. The new lease and delivery limits apply to
// the next claim. The ordering of a queue that holds messages cannot change
// (ErrInvalidOrdering).
func (s *Store) UpdateQueue(ctx context.Context, name string, opts QueueOptions) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	q, err := resolveQueue(name, opts)
	if err != nil {
		return err
	}
	defer s.queues.forget(name)
	return s.Tx(ctx, func(tx *Tx) error { return engine.UpdateQueue(tx.Context(), tx.SQL(), q, s.now()) })
}

// DeleteQueue removes a queue and everything in it: messages in every
// state, dedup rows, receipts and attempts.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := validateQueueName(name); err != nil {
		return err
	}
	defer s.queues.forget(name)
	return s.Tx(ctx, func(tx *Tx) error { return engine.DeleteQueue(tx.Context(), tx.SQL(), name) })
}

// GetQueue returns one queue, or ErrQueueNotFound.
func (s *Store) GetQueue(ctx context.Context, name string) (QueueInfo, error) {
	if err := s.checkOpen(); err != nil {
		return QueueInfo{}, err
	}
	if err := validateQueueName(name); err != nil {
		return QueueInfo{}, err
	}
	q, err := engine.GetQueue(ctx, s.db, name)
	if err != nil {
		return QueueInfo{}, err
	}
	return queueInfo(q), nil
}

// ListQueues returns every queue in name order.
func (s *Store) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	qs, err := engine.ListQueues(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		out[i] = queueInfo(q)
	}
	return out, nil
}
