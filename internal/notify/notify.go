// Package notify wakes waiting receivers when a commit makes a message of
// their queue claimable. The store's connection reports row changes as they
// happen (Mark) and the end of each transaction (Commit, Rollback); only a
// commit wakes anyone, so a rolled-back send wakes nothing.
package notify

import "sync"

// Notifier is safe for concurrent use. The zero value is not usable; call New.
type Notifier struct {
	mu      sync.Mutex
	pending map[string]struct{}      // queues changed by the open transaction
	waiters map[string]chan struct{} // closed on the next commit that touches the queue
}

// New returns an empty Notifier.
func New() *Notifier {
	return &Notifier{pending: map[string]struct{}{}, waiters: map[string]chan struct{}{}}
}

// Wait returns a channel that is closed by the next commit that makes a
// message of queue claimable. Take it before looking at the queue, so that a
// commit between the look and the wait is not missed.
func (n *Notifier) Wait(queue string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waiters[queue]
	if !ok {
		ch = make(chan struct{})
		n.waiters[queue] = ch
	}
	return ch
}

// Mark records that the open transaction made a message of queue claimable.
func (n *Notifier) Mark(queue string) {
	n.mu.Lock()
	n.pending[queue] = struct{}{}
	n.mu.Unlock()
}

// Commit wakes the waiters of every queue marked since the last commit or
// rollback.
func (n *Notifier) Commit() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q := range n.pending {
		if ch, ok := n.waiters[q]; ok {
			close(ch)
			delete(n.waiters, q)
		}
		delete(n.pending, q)
	}
}

// Rollback forgets what the transaction marked.
func (n *Notifier) Rollback() {
	n.mu.Lock()
	clear(n.pending)
	n.mu.Unlock()
}

// WakeAll wakes every waiter (used on Close).
func (n *Notifier) WakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for q, ch := range n.waiters {
		close(ch)
		delete(n.waiters, q)
	}
}
