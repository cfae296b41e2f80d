package mqlite

import (
	"sync"

	"github.com/mqlite/mqlite/internal/engine"
)

// settledInTx keeps what the settlements made inside a caller's transaction
// (consumer.CompleteTx, consumer.RejectTx) leave to do once it ends: the
// registry of Receivers forgets their deliveries when the transaction
// commits, and never when it rolls back. The tally's cause is set at once,
// like the store's own settlements set it: the tally itself applies its
// counts on commit only. Its methods run on the connection's goroutine
// (the SQL function and the hooks); the mutex keeps the race detector's
// view of that plain.
type settledInTx struct {
	mu    sync.Mutex
	locks []Lock
}

// settling records a settlement op of the delivery (queue, seq, token),
// inside the current transaction (engine.ConnConfig.Settling). The whole
// lock is kept: a settlement that names another seq releases nothing, and
// the registry must not forget the lock its token holds.
func (s *Store) settling(op engine.Op, queue string, seq int64, token string) {
	s.tally.tag(causeOf(op))
	s.txSettled.mu.Lock()
	s.txSettled.locks = append(s.txSettled.locks, Lock{Queue: queue, Seq: seq, Token: token})
	s.txSettled.mu.Unlock()
}

// settledCommitted lets the registry forget the deliveries settled inside
// the transaction that committed.
func (s *Store) settledCommitted() {
	s.txSettled.mu.Lock()
	locks := s.txSettled.locks
	s.txSettled.locks = nil
	s.txSettled.mu.Unlock()
	for _, l := range locks {
		s.receivers.settled(l)
	}
}

// settledRolledBack drops the deliveries settled inside the transaction
// that rolled back: they are still held.
func (s *Store) settledRolledBack() {
	s.txSettled.mu.Lock()
	s.txSettled.locks = nil
	s.txSettled.mu.Unlock()
}
