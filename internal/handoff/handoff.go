// Package handoff is the registry of the Receives that sleep for a
// message, by queue. A transaction of Store.Tx that makes a message of
// their queue claimable (a send, an abandon) claims for the first of them
// before its commit, with the claim a Receive makes, and gives what it
// claimed to that Receive once the commit succeeded: the message reaches
// its receiver without a wake-up and a transaction of its own. A
// transaction that rolls back gives nothing, and its Receive goes on
// sleeping. What a commit claimed and a crash kept from its receiver stays
// locked until its lease ends, as any claim's messages.
//
// The registry is generic over the store's types: M is the message a claim
// returns, O the options of the Receive that sleeps (what the claim made
// for it needs).
package handoff

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
)

// Registry holds the sleeping Receives. The zero value is ready; it is
// safe for concurrent use.
type Registry[M, O any] struct {
	n       atomic.Int32 // waiters registered: the commit's check when none
	off     atomic.Bool  // no hand-off: the commit only wakes (a benchmark's baseline)
	mu      sync.Mutex
	byQueue map[string][]*Waiter[M, O]
}

// Waiter is one sleeping Receive's registration.
type Waiter[M, O any] struct {
	queue string
	opts  O
	// Set under Registry.mu:
	claimer chan struct{} // non-nil while a transaction claims for it; closed when that one ends
	msgs    []M           // what a committed transaction claimed for it
	got     chan struct{} // closed when msgs is set: the Receive stops sleeping
}

// Got is closed when a committed transaction claimed for w: its Receive
// stops sleeping and calls Leave for the messages.
func (w *Waiter[M, O]) Got() <-chan struct{} { return w.got }

// Claim is what a transaction claimed for a waiter, given to it after the
// commit (End).
type Claim[M, O any] struct {
	w    *Waiter[M, O]
	msgs []M
}

// Wait registers a Receive of queue about to sleep. The Receive must call
// Leave when it stops sleeping, whatever woke it.
func (r *Registry[M, O]) Wait(queue string, opts O) *Waiter[M, O] {
	w := &Waiter[M, O]{queue: queue, opts: opts, got: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byQueue == nil {
		r.byQueue = map[string][]*Waiter[M, O]{}
	}
	r.byQueue[queue] = append(r.byQueue[queue], w)
	r.n.Add(1)
	return w
}

// Leave unregisters w and returns what a transaction claimed for it. When
// a transaction claims for w as it leaves, Leave waits for its end: what a
// commit claimed must reach the Receive, not wait for its lease to end.
func (r *Registry[M, O]) Leave(w *Waiter[M, O]) []M {
	r.mu.Lock()
	r.remove(w)
	claimer := w.claimer
	r.mu.Unlock()
	if claimer != nil {
		<-claimer // the transaction runs on the store's connection now: it ends soon
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.msgs
}

// remove takes w out of its queue's waiters, if there; r.mu is held.
func (r *Registry[M, O]) remove(w *Waiter[M, O]) {
	list := r.byQueue[w.queue]
	for i, x := range list {
		if x == w {
			list = append(list[:i:i], list[i+1:]...)
			r.n.Add(-1)
			break
		}
	}
	if len(list) == 0 {
		delete(r.byQueue, w.queue)
	} else {
		r.byQueue[w.queue] = list
	}
}

// Waiting is how many sleeping Receives are registered.
func (r *Registry[M, O]) Waiting() int { return int(r.n.Load()) }

// SetOff turns the hand-off off (true) or on: off, Reserve reserves
// nothing, and a commit only wakes the sleeping Receives, which claim in
// transactions of their own.
func (r *Registry[M, O]) SetOff(off bool) { r.off.Store(off) }

// Reserve takes, for each queue that marked says the open transaction made
// claimable, the first waiter no other transaction claims for, and marks
// it claimed for. Each must be given to End after the transaction.
func (r *Registry[M, O]) Reserve(marked func(queue string) bool) []*Waiter[M, O] {
	if r.n.Load() == 0 || r.off.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Waiter[M, O]
	for q, list := range r.byQueue {
		if !marked(q) {
			continue
		}
		for _, w := range list {
			if w.claimer == nil {
				w.claimer = make(chan struct{})
				out = append(out, w)
				break
			}
		}
	}
	return out
}

// End ends the claims of a transaction on the waiters it reserved: on a
// commit, each waiter with messages claimed gets them and leaves the
// registry; every other (a rollback, nothing claimed) waits on.
func (r *Registry[M, O]) End(reserved []*Waiter[M, O], claims []Claim[M, O], committed bool) {
	if len(reserved) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if committed {
		for _, c := range claims {
			c.w.msgs = c.msgs
			r.remove(c.w)
			close(c.w.got)
		}
	}
	for _, w := range reserved {
		close(w.claimer)
		w.claimer = nil
	}
}

// ClaimFunc claims in tx for a Receive of queue with opts, as that Receive
// would (the same statement: lease, token, delivery count, group order,
// pause).
type ClaimFunc[M, O any] func(ctx context.Context, tx *sql.Tx, queue string, opts O) ([]M, error)

// ClaimFor claims, in tx (the open transaction, about to commit), for each
// waiter reserved, with claim. A claim runs under a savepoint: one that
// fails leaves the transaction as it was, and its waiter is woken by the
// commit as before.
func ClaimFor[M, O any](ctx context.Context, tx *sql.Tx, reserved []*Waiter[M, O], claim ClaimFunc[M, O]) []Claim[M, O] {
	var claims []Claim[M, O]
	for _, w := range reserved {
		msgs, err := claimUnder(ctx, tx, w, claim)
		if err != nil || len(msgs) == 0 {
			continue
		}
		claims = append(claims, Claim[M, O]{w: w, msgs: msgs})
	}
	return claims
}

// claimUnder claims for w under the savepoint mqlite_handoff.
func claimUnder[M, O any](ctx context.Context, tx *sql.Tx, w *Waiter[M, O], claim ClaimFunc[M, O]) ([]M, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT mqlite_handoff"); err != nil {
		return nil, err
	}
	msgs, err := claim(ctx, tx, w.queue, w.opts)
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
	return msgs, nil
}
