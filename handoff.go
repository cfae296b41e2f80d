package mqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mqlite/mqlite/internal/engine"
)

// handoffs are the Receives that sleep for a message, by queue. A
// transaction of Store.Tx that makes a message of their queue claimable
// (a send, an abandon) claims for the first of them before its commit,
// with the claim a Receive makes (the same statement: lease, token,
// delivery count, group order, pause), and gives what it claimed to that
// Receive once the commit succeeded: the message reaches its receiver
// without a wake-up and a transaction of its own. A transaction that rolls
// back gives nothing, and its Receive goes on sleeping. What a commit
// claimed and a crash kept from its receiver stays locked until its lease
// ends, as any claim's messages.
//
// The zero value is ready; it is safe for concurrent use.
type handoffs struct {
	n       atomic.Int32 // waiters registered: Store.Tx's check when none
	off     atomic.Bool  // no hand-off: the commit only wakes (a benchmark's baseline)
	mu      sync.Mutex
	byQueue map[string][]*handoff
}

// handoff is one sleeping Receive's registration.
type handoff struct {
	queue string
	opts  ReceiveOptions
	// Set under handoffs.mu:
	claimer chan struct{} // non-nil while a transaction claims for it; closed when that one ends
	msgs    []Message     // what a committed transaction claimed for it
	got     chan struct{} // closed when msgs is set: the Receive stops sleeping
}

// handoffClaim is what a transaction claimed for h, given to it after the
// commit.
type handoffClaim struct {
	h    *handoff
	msgs []Message
}

// wait registers a Receive of queue about to sleep. The Receive must call
// leave when it stops sleeping, whatever woke it.
func (hs *handoffs) wait(queue string, opts ReceiveOptions) *handoff {
	h := &handoff{queue: queue, opts: opts, got: make(chan struct{})}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.byQueue == nil {
		hs.byQueue = map[string][]*handoff{}
	}
	hs.byQueue[queue] = append(hs.byQueue[queue], h)
	hs.n.Add(1)
	return h
}

// leave unregisters h and returns what a transaction claimed for it. When a
// transaction claims for h as it leaves, leave waits for its end: what a
// commit claimed must reach the Receive, not wait for its lease to end.
func (hs *handoffs) leave(h *handoff) []Message {
	hs.mu.Lock()
	hs.remove(h)
	claimer := h.claimer
	hs.mu.Unlock()
	if claimer != nil {
		<-claimer // the transaction runs on the store's connection now: it ends soon
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return h.msgs
}

// remove takes h out of its queue's waiters, if there; hs.mu is held.
func (hs *handoffs) remove(h *handoff) {
	list := hs.byQueue[h.queue]
	for i, x := range list {
		if x == h {
			list = append(list[:i:i], list[i+1:]...)
			hs.n.Add(-1)
			break
		}
	}
	if len(list) == 0 {
		delete(hs.byQueue, h.queue)
	} else {
		hs.byQueue[h.queue] = list
	}
}

// reserve takes, for each queue that marked says the open transaction made
// claimable, the first waiter no other transaction claims for, and marks
// it claimed for. Each must be given to end after the transaction.
func (hs *handoffs) reserve(marked func(queue string) bool) []*handoff {
	if hs.n.Load() == 0 || hs.off.Load() {
		return nil
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var out []*handoff
	for q, list := range hs.byQueue {
		if !marked(q) {
			continue
		}
		for _, h := range list {
			if h.claimer == nil {
				h.claimer = make(chan struct{})
				out = append(out, h)
				break
			}
		}
	}
	return out
}

// end ends the claims of a transaction on the waiters it reserved: on a
// commit, each waiter with messages claimed gets them and leaves the
// registry; every other (a rollback, nothing claimed) waits on.
func (hs *handoffs) end(reserved []*handoff, claims []handoffClaim, committed bool) {
	if len(reserved) == 0 {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if committed {
		for _, c := range claims {
			c.h.msgs = c.msgs
			hs.remove(c.h)
			close(c.h.got)
		}
	}
	for _, h := range reserved {
		close(h.claimer)
		h.claimer = nil
	}
}

// handOff claims, in tx (the open transaction of Store.Tx, about to
// commit), for each waiter reserved, as its Receive would. A claim runs
// under a savepoint: one that fails leaves the transaction as it was, and
// its waiter is woken by the commit as before.
func (s *Store) handOff(ctx context.Context, tx *sql.Tx, reserved []*handoff) []handoffClaim {
	var claims []handoffClaim
	for _, h := range reserved {
		rows, err := s.claimUnder(ctx, tx, h)
		if err != nil || len(rows) == 0 {
			continue
		}
		msgs := make([]Message, len(rows))
		for i, r := range rows {
			msgs[i] = toMessage(h.queue, r)
		}
		claims = append(claims, handoffClaim{h: h, msgs: msgs})
	}
	return claims
}

// claimUnder claims for h under the savepoint mqlite_handoff.
func (s *Store) claimUnder(ctx context.Context, tx *sql.Tx, h *handoff) ([]engine.Row, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT mqlite_handoff"); err != nil {
		return nil, err
	}
	rows, _, err := s.claimIn(ctx, tx, h.queue, h.opts)
	if err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO mqlite_handoff"); rerr != nil {
			return nil, fmt.Errorf("hand-off: %w (and rolling back: %v)", err, rerr)
		}
	}
	if _, rerr := tx.ExecContext(ctx, "RELEASE mqlite_handoff"); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}
