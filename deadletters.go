package mqlite

import (
	"context"
	"database/sql"

	"github.com/mqlite/mqlite/internal/driver"
)

// PeekDeadLetters returns the dead letters of queue in sequence order, with
// why (DeadLetterReason, DeadLetterDescription), when (DeadLetteredAt) and
// after how many deliveries (DeliveryCount) each was dead-lettered.
func (s *Store) PeekDeadLetters(ctx context.Context, queue string, opts PeekParams) ([]Message, error) {
	return s.peek(ctx, queue, opts, driver.Executor.PeekDeadLetters)
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
