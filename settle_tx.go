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
	mu     sync.Mutex
	tokens []string
}

// settling records a settlement op of the delivery token, inside the
// current transaction (engine.ConnConfig.Settling).
func (s *Store) settling(op engine.Op, token string) {
	s.tally.tag(causeOf(op))
	s.txSettled.mu.Lock()
	s.txSettled.tokens = append(s.txSettled.tokens, token)
	s.txSettled.mu.Unlock()
}

// settledCommitted lets the registry forget the deliveries settled inside
// the transaction that committed.
func (s *Store) settledCommitted() {
	s.txSettled.mu.Lock()
	tokens := s.txSettled.tokens
	s.txSettled.tokens = nil
	s.txSettled.mu.Unlock()
	for _, t := range tokens {
		s.receivers.settled(t)
	}
}

// settledRolledBack drops the deliveries settled inside the transaction
// that rolled back: they are still held.
func (s *Store) settledRolledBack() {
	s.txSettled.mu.Lock()
	s.txSettled.tokens = nil
	s.txSettled.mu.Unlock()
}
