package mqlite

import (
	"context"
	"sort"
	"sync"
	"time"
)

// ReceiverGrace is how long a receiver that neither waits in a Receive nor
// holds a lock stays in Store.Receivers after it was last seen (by the
// store's Clock): the gap between two receives of a consumer at work.
const ReceiverGrace = 5 * time.Second

// ReceiverTag names who calls Receive, for Store.Receivers. Name tells two
// receivers of one key and address apart (consumer.Loop names each of its
// loops; the broker takes the client's instance); KeyID and Addr are the
// broker's: the access key and the remote host of a remote receiver.
type ReceiverTag struct {
	Name  string
	KeyID string
	Addr  string
}

// inProcess is the tag of a Receive whose ctx carries none.
var inProcess = ReceiverTag{Name: "in-process"}

type receiverKey struct{}

// WithReceiver returns ctx tagged with t: the Receive and ReceiveDeferred
// calls made with it are counted under t in Store.Receivers. An untagged
// call counts under the name "in-process".
func WithReceiver(ctx context.Context, t ReceiverTag) context.Context {
	return context.WithValue(ctx, receiverKey{}, t)
}

// receiverOf returns the tag of ctx, or inProcess.
func receiverOf(ctx context.Context) ReceiverTag {
	if t, ok := ctx.Value(receiverKey{}).(ReceiverTag); ok {
		return t
	}
	return inProcess
}

// Receiver is one receiver of one queue, as Store.Receivers reports it.
type Receiver struct {
	Queue string
	ReceiverTag
	// Waiting is how many of its Receive calls are running now (waiting
	// for a message, or claiming).
	Waiting int
	// Locks is how many of the deliveries it received hold a running
	// lease: not settled, not deferred, not past their lease.
	Locks int
	// LastSeen is when it last called Receive, or a Receive of it ended.
	LastSeen time.Time
}

// receiverID is a receiver of one queue.
type receiverID struct {
	queue string
	tag   ReceiverTag
}

// receiverState is what the registry keeps of one receiver.
type receiverState struct {
	waiting  int
	lastSeen int64 // epoch ms
}

// heldLock is a delivery a receiver holds, by its token. The seq is kept
// so that a settlement naming the token with another message (refused with
// ErrLockLost, the lease still running) does not forget it.
type heldLock struct {
	who   receiverID
	seq   int64
	until int64 // lease end, epoch ms
}

// receivers is the live registry of Store.Receivers: kept in memory, from
// the store's Receive and settlement calls, never from the file. A
// receiver leaves it once it waits in no Receive, holds no lease and was
// not seen for ReceiverGrace. Safe for concurrent use.
type receivers struct {
	mu    sync.Mutex
	now   func() int64
	live  map[receiverID]*receiverState
	locks map[string]heldLock // by token
	// pruneAt is the size of locks past which enter drops the lapsed ones.
	pruneAt int
}

func newReceivers(now func() int64) *receivers {
	return &receivers{now: now, live: map[receiverID]*receiverState{}, locks: map[string]heldLock{}, pruneAt: 1024}
}

// enter records a Receive of who starting; leave must follow.
func (r *receivers) enter(who receiverID) {
	now := r.now()
	r.mu.Lock()
	st := r.live[who]
	if st == nil {
		st = &receiverState{}
		r.live[who] = st
	}
	st.waiting++
	st.lastSeen = now
	r.mu.Unlock()
}

// leave records that Receive ending, with the deliveries it handed out.
func (r *receivers) leave(who receiverID, msgs []Message) {
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
func (r *receivers) hold(who receiverID, msgs []Message, now int64) {
	for _, m := range msgs {
		if m.LockToken != "" {
			r.locks[m.LockToken] = heldLock{who: who, seq: m.Seq, until: millis(m.LockedUntil)}
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

// received records a delivery handed out outside Receive (ReceiveDeferred).
func (r *receivers) received(who receiverID, m Message) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.live[who]
	if st == nil {
		st = &receiverState{}
		r.live[who] = st
	}
	st.lastSeen = now
	r.hold(who, []Message{m}, now)
}

// settled records that l's delivery no longer holds a lease (settled,
// deferred, or found lost). Only the delivery l names is forgotten: a lock
// whose token is held for another message (another seq or queue) released
// nothing, so that lease still counts.
func (r *receivers) settled(l Lock) {
	r.mu.Lock()
	if h, ok := r.locks[l.Token]; ok && h.is(l) {
		delete(r.locks, l.Token)
	}
	r.mu.Unlock()
}

// renewed records l's lease renewed until until.
func (r *receivers) renewed(l Lock, until time.Time) {
	r.mu.Lock()
	if h, ok := r.locks[l.Token]; ok && h.is(l) {
		h.until = millis(until)
		r.locks[l.Token] = h
	}
	r.mu.Unlock()
}

// is reports whether l names the delivery h (its token is the map's key).
func (h heldLock) is(l Lock) bool { return h.seq == l.Seq && h.who.queue == l.Queue }

// dropQueue forgets the receivers of a deleted queue.
func (r *receivers) dropQueue(queue string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, st := range r.live {
		if id.queue == queue && st.waiting == 0 {
			delete(r.live, id)
		}
	}
	for tok, l := range r.locks {
		if l.who.queue == queue {
			delete(r.locks, tok)
		}
	}
}

// prune forgets the receivers gone and the lapsed leases, and returns the
// leases each receiver left holds; r.mu is held. The store's reaper runs it
// as time passes (pruneReceivers), so that the registry does not grow
// until something lists it.
func (r *receivers) prune(now int64) map[receiverID]int {
	held := map[receiverID]int{}
	for tok, l := range r.locks {
		if l.until <= now {
			delete(r.locks, tok)
			continue
		}
		held[l.who]++
	}
	grace := ReceiverGrace.Milliseconds()
	for id, st := range r.live {
		if st.waiting == 0 && held[id] == 0 && now-st.lastSeen >= grace {
			delete(r.live, id)
		}
	}
	return held
}

// pruneReceivers is prune under the registry's lock.
func (r *receivers) pruneReceivers(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now)
}

// size is how many receivers and held leases the registry keeps.
func (r *receivers) size() (live, locks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live), len(r.locks)
}

// list returns the live receivers, sorted by queue, key, address and name,
// and forgets those gone (and the lapsed leases).
func (r *receivers) list() []Receiver {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.prune(now)
	out := make([]Receiver, 0, len(r.live))
	for id, st := range r.live {
		out = append(out, Receiver{Queue: id.queue, ReceiverTag: id.tag, Waiting: st.waiting,
			Locks: held[id], LastSeen: fromMillis(st.lastSeen)})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.KeyID != b.KeyID {
			return a.KeyID < b.KeyID
		}
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.Name < b.Name
	})
	return out
}

// Receivers returns the live receivers of every queue, sorted by queue: the
// in-process ones (consumer.Loop, each loop by name; "in-process" for a
// Receive whose ctx carries no ReceiverTag) and the broker's remote ones
// (by key id, address and client instance), each with how many of its
// receives wait now, how many leases it holds and when it was last seen. A
// receiver is live while it waits, holds a lease, or was seen within
// ReceiverGrace. The registry is kept in memory from the store's own calls:
// it reads no table, and starts empty at Open.
func (s *Store) Receivers(ctx context.Context) ([]Receiver, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.receivers.list(), nil
}

// receiversOf returns the receivers of queue among all.
func receiversOf(all []Receiver, queue string) []Receiver {
	var out []Receiver
	for _, r := range all {
		if r.Queue == queue {
			out = append(out, r)
		}
	}
	return out
}
