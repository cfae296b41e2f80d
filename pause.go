package mqlite

import (
	"context"
	"database/sql"
)

// PauseQueue pauses the queue name, in the file, so that it holds for
// every consumer and across restarts: while it is paused, Receive claims
// nothing (a Receive with a Wait waits, as on an empty queue; a
// consumer.Loop and a relay idle without an error), while sends are still
// accepted and deliveries already out can still be settled and renewed.
// ReceiveDeferred, which asks for one message by its seq, is not paused.
// Pausing a paused queue changes nothing (QueueInfo.PausedAt keeps the
// first pause). An unknown queue is ErrQueueNotFound.
func (s *Store) PauseQueue(ctx context.Context, name string) error {
	return s.setPaused(ctx, name, true)
}

// ResumeQueue resumes a paused queue: the receives waiting on it claim at
// once. Resuming a running queue changes nothing. An unknown queue is
// ErrQueueNotFound.
func (s *Store) ResumeQueue(ctx context.Context, name string) error {
	return s.setPaused(ctx, name, false)
}

func (s *Store) setPaused(ctx context.Context, name string, pause bool) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := validateQueueName(name); err != nil {
		return err
	}
	defer s.queues.forget(name)
	var at int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if pause {
			at = s.now()
		}
		if err := s.eng.SetPaused(ctx, tx, name, at); err != nil {
			return err
		}
		// Before the commit, which wakes the receives waiting: the first
		// one woken must read the queue anew.
		s.queues.forget(name)
		if !pause {
			s.notify.Mark(name)
		}
		return nil
	})
	if err == nil {
		s.tally.Paused(name, pause)
	}
	return err
}
