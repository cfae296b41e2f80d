// Package receivers is the live registry of Store.Receivers: who calls
// Receive on which queue, how many of its calls wait now, which leases it
// holds and when it was last seen. It is kept in memory from the store's
// Receive and settlement calls, never from the file; a settlement made
// inside a caller's transaction is applied when that transaction commits.
//
// The registry is generic over the store's types: T is the tag that names
// a receiver (comparable: it is part of a map key), M the message a Receive
// hands out, whose lease the registry reads through the func given to New.
package receivers

import (
	"sync"
	"time"
)

// ID is a receiver of one queue.
type ID[T comparable] struct {
	Queue string
	Tag   T
}

// Lease is the lease of a delivery a Receive handed out: its lock token
// ("" for a delivery that holds none: receive-and-delete), its message's
// seq and the lease's end, in epoch milliseconds.
type Lease struct {
	Token string
	Seq   int64
	Until int64
}

// Entry is one receiver of one queue, as Registry.List reports it.
type Entry[T comparable] struct {
	ID[T]
	// Waiting is how many of its Receive calls run now.
	Waiting int
	// Locks is how many of its deliveries hold a running lease.
	Locks int
	// LastSeen is when it last called Receive, or a Receive of it ended,
	// in epoch milliseconds.
	LastSeen int64
}

// state is what the registry keeps of one receiver.
type state struct {
	waiting  int
	lastSeen int64 // epoch ms
}

// held is a delivery a receiver holds, by its token. The seq is kept so
// that a settlement naming the token with another message (refused, the
// lease still running) does not forget it.
type held[T comparable] struct {
	who   ID[T]
	seq   int64
	until int64 // lease end, epoch ms
}

// Registry is the live registry of receivers. A receiver leaves it once it
// waits in no Receive, holds no lease and was not seen for the grace given
// to New. Safe for concurrent use.
type Registry[T comparable, M any] struct {
	mu      sync.Mutex
	now     func() int64 // the store's clock, epoch ms
	grace   int64        // ms
	leaseOf func(M) Lease
	live    map[ID[T]]*state
	locks   map[string]held[T] // by token
	// pruneAt is the size of locks past which hold drops the lapsed ones.
	pruneAt int
	inTx    settledInTx
}

// New returns an empty registry: now is the store's clock (epoch ms),
// grace how long an idle receiver stays listed after it was last seen,
// and leaseOf reads the lease of a message handed out.
func New[T comparable, M any](now func() int64, grace time.Duration, leaseOf func(M) Lease) *Registry[T, M] {
	return &Registry[T, M]{now: now, grace: grace.Milliseconds(), leaseOf: leaseOf,
		live: map[ID[T]]*state{}, locks: map[string]held[T]{}, pruneAt: 1024}
}

// Enter records a Receive of who starting; Leave must follow.
func (r *Registry[T, M]) Enter(who ID[T]) {
	now := r.now()
	r.mu.Lock()
	st := r.live[who]
	if st == nil {
		st = &state{}
		r.live[who] = st
	}
	st.waiting++
	st.lastSeen = now
	r.mu.Unlock()
}

// Leave records that Receive ending, with the deliveries it handed out.
func (r *Registry[T, M]) Leave(who ID[T], msgs []M) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.live[who]; st != nil {
		st.waiting--
		st.lastSeen = now
	}
	r.hold(who, msgs, now)
}

// hold records the peek-lock deliveries of msgs as held by who; r.mu is
// held.
func (r *Registry[T, M]) hold(who ID[T], msgs []M, now int64) {
	for _, m := range msgs {
		if l := r.leaseOf(m); l.Token != "" {
			r.locks[l.Token] = held[T]{who: who, seq: l.Seq, until: l.Until}
		}
	}
	if len(r.locks) > r.pruneAt {
		for tok, l := range r.locks {
			if l.until <= now {
				delete(r.locks, tok)
			}
		}
		r.pruneAt = max(1024, 2*len(r.locks))
	}
}

// Received records a delivery handed out outside Receive (ReceiveDeferred).
func (r *Registry[T, M]) Received(who ID[T], m M) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.live[who]
	if st == nil {
		st = &state{}
		r.live[who] = st
	}
	st.lastSeen = now
	r.hold(who, []M{m}, now)
}

// Settled records that the delivery (queue, seq) of token no longer holds
// a lease (settled, deferred, or found lost). Only that delivery is
// forgotten: a token held for another message (another seq or queue)
// released nothing, so that lease still counts.
func (r *Registry[T, M]) Settled(queue string, seq int64, token string) {
	r.mu.Lock()
	if h, ok := r.locks[token]; ok && h.is(queue, seq) {
		delete(r.locks, token)
	}
	r.mu.Unlock()
}

// Renewed records the lease of the delivery (queue, seq) of token renewed
// until until (epoch ms).
func (r *Registry[T, M]) Renewed(queue string, seq int64, token string, until int64) {
	r.mu.Lock()
	if h, ok := r.locks[token]; ok && h.is(queue, seq) {
		h.until = until
		r.locks[token] = h
	}
	r.mu.Unlock()
}

// is reports whether (queue, seq) names the delivery h (its token is the
// map's key).
func (h held[T]) is(queue string, seq int64) bool { return h.seq == seq && h.who.Queue == queue }

// DropQueue forgets the receivers of a deleted queue.
func (r *Registry[T, M]) DropQueue(queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, st := range r.live {
		if id.Queue == queue && st.waiting == 0 {
			delete(r.live, id)
		}
	}
	for tok, l := range r.locks {
		if l.who.Queue == queue {
			delete(r.locks, tok)
		}
	}
}

// prune forgets the receivers gone and the lapsed leases, and returns the
// leases each receiver left holds; r.mu is held.
func (r *Registry[T, M]) prune(now int64) map[ID[T]]int {
	heldBy := map[ID[T]]int{}
	for tok, l := range r.locks {
		if l.until <= now {
			delete(r.locks, tok)
			continue
		}
		heldBy[l.who]++
	}
	for id, st := range r.live {
		if st.waiting == 0 && heldBy[id] == 0 && now-st.lastSeen >= r.grace {
			delete(r.live, id)
		}
	}
	return heldBy
}

// Prune forgets the receivers gone and the lapsed leases as of now (epoch
// ms). The store's reaper runs it as time passes, so that the registry
// does not grow until something lists it.
func (r *Registry[T, M]) Prune(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now)
}

// Size is how many receivers and held leases the registry keeps.
func (r *Registry[T, M]) Size() (live, locks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live), len(r.locks)
}

// List returns the live receivers, unsorted, and forgets those gone (and
// the lapsed leases).
func (r *Registry[T, M]) List() []Entry[T] {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	heldBy := r.prune(now)
	out := make([]Entry[T], 0, len(r.live))
	for id, st := range r.live {
		out = append(out, Entry[T]{ID: id, Waiting: st.waiting, Locks: heldBy[id], LastSeen: st.lastSeen})
	}
	return out
}

// settledInTx is what the settlements made inside a caller's transaction
// (consumer.CompleteTx, consumer.RejectTx) leave to do once it ends: the
// registry forgets their deliveries when the transaction commits, and
// never when it rolls back. They are kept per transaction, by the key of
// its connection (Key): on a pool, transactions run side by side, and one's
// rollback must neither drop nor apply another's. Key 0 (the one
// connection of SQLite) is a field, so its path costs no map. Its methods
// run on the connections' goroutines (the SQL function and the hooks); the
// mutex keeps them apart.
type settledInTx struct {
	mu     sync.Mutex
	one    []settledLock         // Key 0's
	others map[Key][]settledLock // every other key's open transaction
}

// Key names the transaction a settlement belongs to: the connection it
// runs on (driver.TxKey). A store with one connection reports Key 0.
type Key = uint64

// settledLock is a delivery settled inside the open transaction.
type settledLock struct {
	queue string
	seq   int64
	token string
}

// locks returns the settlements of key; r.inTx.mu is held.
func (s *settledInTx) locks(key Key) []settledLock {
	if key == 0 {
		return s.one
	}
	return s.others[key]
}

// set makes l the settlements of key (none: forgotten); s.mu is held.
func (s *settledInTx) set(key Key, l []settledLock) {
	switch {
	case key == 0:
		s.one = l
	case len(l) == 0:
		delete(s.others, key)
	default:
		if s.others == nil {
			s.others = map[Key][]settledLock{}
		}
		s.others[key] = l
	}
}

// SettledInTx records a settlement of the delivery (queue, seq) of token
// inside the open transaction of key: Committed forgets it, RolledBack does
// not. The whole lock is kept: a settlement that names another seq releases
// nothing, and the registry must not forget the lock its token holds.
func (r *Registry[T, M]) SettledInTx(key Key, queue string, seq int64, token string) {
	r.inTx.mu.Lock()
	r.inTx.set(key, append(r.inTx.locks(key), settledLock{queue: queue, seq: seq, token: token}))
	r.inTx.mu.Unlock()
}

// Committed forgets the deliveries settled inside the transaction of key,
// which committed (the commit hook).
func (r *Registry[T, M]) Committed(key Key) {
	r.inTx.mu.Lock()
	locks := r.inTx.locks(key)
	r.inTx.set(key, nil)
	r.inTx.mu.Unlock()
	for _, l := range locks {
		r.Settled(l.queue, l.seq, l.token)
	}
}

// RolledBack drops the deliveries settled inside the transaction of key,
// which rolled back: they are still held (the rollback hook). Another
// transaction's are kept.
func (r *Registry[T, M]) RolledBack(key Key) {
	r.inTx.mu.Lock()
	r.inTx.set(key, nil)
	r.inTx.mu.Unlock()
}

// MarkInTx returns where the settlements of the open transaction of key
// stand, for UndoInTx: a step of a group commit begins.
func (r *Registry[T, M]) MarkInTx(key Key) int {
	r.inTx.mu.Lock()
	defer r.inTx.mu.Unlock()
	return len(r.inTx.locks(key))
}

// UndoInTx drops the settlements of the transaction of key recorded since
// mark: the step that followed it rolled back, so they are not applied
// when the group commits.
func (r *Registry[T, M]) UndoInTx(key Key, mark int) {
	r.inTx.mu.Lock()
	l := r.inTx.locks(key)
	mark = min(mark, len(l))
	clear(l[mark:])
	r.inTx.set(key, l[:mark])
	r.inTx.mu.Unlock()
}

// PendingInTx is how many transactions hold settlements not yet applied or
// dropped: for the tests, which check that every one ended.
func (r *Registry[T, M]) PendingInTx() int {
	r.inTx.mu.Lock()
	defer r.inTx.mu.Unlock()
	n := len(r.inTx.others)
	if len(r.inTx.one) > 0 {
		n++
	}
	return n
}
