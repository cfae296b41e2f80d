// Package notify wakes waiting receivers when a commit makes a message of
// their queue claimable, or brings the moment one becomes claimable (a
// schedule, an Abandon delay, a lease end) nearer than they planned to wake.
// The store's connection reports row changes as they happen (Mark, Due) and
// the end of each transaction (Commit, Rollback); only a commit wakes
// anyone, so a rolled-back send wakes nothing.
package notify

import (
	"context"
	"sync"
)

// Notifier is safe for concurrent use. The zero value is not usable; call New.
type Notifier struct {
	mu         sync.Mutex
	claimable  map[string]struct{} // queues the open transaction made claimable
	due        map[string]int64    // the earliest due moment it wrote, per queue
	generation map[string]*round   // the waiters of each queue
}

// round is the waiters of one queue since its last wake-up: they share ch.
type round struct {
	ch        chan struct{}
	unplanned int   // waiters that have not said when they wake by themselves
	latest    int64 // the latest moment at which a planned waiter wakes by itself
}

// New returns an empty Notifier.
func New() *Notifier {
	return &Notifier{claimable: map[string]struct{}{}, due: map[string]int64{}, generation: map[string]*round{}}
}

// Waiter is one receiver's registration. Take it before looking at the
// queue, so that a commit between the look and the wait is not missed; then
// Plan when it will wake by itself, or Leave if it will not wait.
type Waiter struct {
	n     *Notifier
	queue string
	r     *round
	done  bool
}

// Wait registers a waiter on queue.
func (n *Notifier) Wait(queue string) *Waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.generation[queue]
	if !ok {
		r = &round{ch: make(chan struct{})}
		n.generation[queue] = r
	}
	r.unplanned++
	return &Waiter{n: n, queue: queue, r: r}
}

// C is closed when the waiter should look at the queue again.
func (w *Waiter) C() <-chan struct{} { return w.r.ch }

// Plan says the waiter wakes by itself at the moment at (epoch milliseconds
// of the store's clock) unless woken before: a commit that writes an earlier
// due moment for the queue wakes it.
func (w *Waiter) Plan(at int64) {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	w.r.unplanned--
	w.r.latest = max(w.r.latest, at)
}

// Leave withdraws a waiter that will not wait.
func (w *Waiter) Leave() {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if !w.done {
		w.done = true
		w.r.unplanned--
	}
}

// Mark records that the open transaction made a message of queue claimable.
func (n *Notifier) Mark(queue string) {
	n.mu.Lock()
	n.claimable[queue] = struct{}{}
	n.mu.Unlock()
}

// Marked reports whether the open transaction made a message of queue
// claimable so far.
func (n *Notifier) Marked(queue string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.claimable[queue]
	return ok
}

// Due records that the open transaction wrote a message of queue that
// becomes claimable at the moment at without another commit.
func (n *Notifier) Due(queue string, at int64) {
	n.mu.Lock()
	if cur, ok := n.due[queue]; !ok || at < cur {
		n.due[queue] = at
	}
	n.mu.Unlock()
}

// Commit wakes the waiters of every queue marked claimable since the last
// commit or rollback, and the waiters of every queue given a due moment
// earlier than one of them planned to wake (or who have not planned yet).
func (n *Notifier) Commit() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q := range n.claimable {
		n.wake(q)
	}
	for q, at := range n.due {
		if r, ok := n.generation[q]; ok && (r.unplanned > 0 || at < r.latest) {
			n.wake(q)
		}
	}
	clear(n.claimable)
	clear(n.due)
}

func (n *Notifier) wake(queue string) {
	if r, ok := n.generation[queue]; ok {
		close(r.ch)
		delete(n.generation, queue)
	}
}

// Rollback forgets what the transaction marked.
func (n *Notifier) Rollback() {
	n.mu.Lock()
	clear(n.claimable)
	clear(n.due)
	n.mu.Unlock()
}

// Wake wakes the waiters of queue now, or every waiter when queue is "":
// what another process committed (the PostgreSQL engine's notifications).
func (n *Notifier) Wake(queue string) {
	if queue == "" {
		n.WakeAll()
		return
	}
	n.mu.Lock()
	n.wake(queue)
	n.mu.Unlock()
}

// WakeAll wakes every waiter (used on Close).
func (n *Notifier) WakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q := range n.generation {
		n.wake(q)
	}
}

// interruptKey is the context key of WithInterrupt.
type interruptKey struct{}

// WithInterrupt returns a copy of ctx under which the store's waits for a
// message end early when ch yields: a Receive that sleeps then returns no
// messages and no error. Unlike cancelling ctx, it never cuts a claim
// short: a claim that runs when ch yields commits and returns what it took
// (a claim under a cancelled ctx rolls back, and the message it took has
// to be claimed again). A value that ch yields while no wait sleeps stays
// in ch for the next.
func WithInterrupt(ctx context.Context, ch <-chan struct{}) context.Context {
	return context.WithValue(ctx, interruptKey{}, ch)
}

// Interrupt returns the channel of WithInterrupt, or nil, which never
// yields.
func Interrupt(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(interruptKey{}).(<-chan struct{})
	return ch
}
