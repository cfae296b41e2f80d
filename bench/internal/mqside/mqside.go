// Package mqside is mqlite's side of the benchmark commands of this module:
// the send and the drain each of them measures, the same on every engine.
package mqside

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// Send sends msgs to queue in one Store.Tx: SendOne for one, SendBatch for
// more, whose every slot must be a new message.
func Send(ctx context.Context, st *mqlite.Store, queue string, msgs []outbox.Message) error {
	return st.Tx(ctx, func(tx *mqlite.Tx) error {
		if len(msgs) == 1 {
			_, err := outbox.SendOne(tx.Context(), tx.SQL(), queue, msgs[0])
			return err
		}
		res, err := outbox.SendBatch(tx.Context(), tx.SQL(), queue, msgs)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil || r.Duplicate {
				return fmt.Errorf("slot: duplicate %v, %w", r.Duplicate, r.Err)
			}
		}
		return nil
	})
}

// Drain receives and completes n messages of queue, batch at a time:
// Complete for one, CompleteBatch for more. An empty queue before n is an
// error.
func Drain(ctx context.Context, st *mqlite.Store, queue string, n, batch int) error {
	for done := 0; done < n; {
		msgs, err := st.Receive(ctx, queue, mqlite.ReceiveOptions{Max: batch})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("queue empty after %d of %d", done, n)
		}
		if len(msgs) == 1 {
			if err := st.Complete(ctx, msgs[0].Lock()); err != nil {
				return err
			}
		} else {
			locks := make([]mqlite.Lock, len(msgs))
			for i, msg := range msgs {
				locks[i] = msg.Lock()
			}
			errs, err := st.CompleteBatch(ctx, locks)
			if err != nil {
				return err
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
		}
		done += len(msgs)
	}
	return nil
}

// Counter is a consumer.Observer that signals each completion on its
// channel and ignores the rest.
type Counter chan struct{}

// Received implements consumer.Observer.
func (Counter) Received(string, int) {}

// Completed implements consumer.Observer: one signal.
func (c Counter) Completed(mqlite.Message, time.Duration) { c <- struct{}{} }

// Abandoned implements consumer.Observer.
func (Counter) Abandoned(mqlite.Message, time.Duration, time.Duration, error) {}

// Rejected implements consumer.Observer.
func (Counter) Rejected(mqlite.Message, time.Duration, error) {}

// LockLost implements consumer.Observer.
func (Counter) LockLost(mqlite.Message, error) {}

// SettleFailed implements consumer.Observer.
func (Counter) SettleFailed(mqlite.Message, error) {}
