package engine

import "sync"

// DueBounds remembers, per queue, a moment before which no scheduled
// message of the queue falls due and no lease of it lapses, so that a
// claim skips the due probe (two index seeks and a statement) when nothing
// can be due. A queue without an entry is unknown: the claim probes, and
// the probe sets the entry. The connection's pre-update hook lowers an
// entry for every row an insert or update leaves scheduled or locked (held
// or not), so an entry stays a lower bound of the queue's due moments
// whatever the statements do; a rollback forgets every entry, because the
// rows it brings back were never seen by the hook. The store is the only
// writer of its file, so nothing changes rows behind the hook.
type DueBounds struct {
	mu sync.Mutex
	m  map[string]int64
}

// NewDueBounds returns bounds that know nothing yet.
func NewDueBounds() *DueBounds { return &DueBounds{m: map[string]int64{}} }

// quiet reports whether nothing of queue can be due at now.
func (b *DueBounds) quiet(queue string, now int64) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	at, ok := b.m[queue]
	b.mu.Unlock()
	return ok && now < at
}

// set records that nothing of queue is due before at.
func (b *DueBounds) set(queue string, at int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.m[queue] = at
	b.mu.Unlock()
}

// lower records a row of queue that falls due at at.
func (b *DueBounds) lower(queue string, at int64) {
	b.mu.Lock()
	if cur, ok := b.m[queue]; ok && at < cur {
		b.m[queue] = at
	}
	b.mu.Unlock()
}

// forget drops every entry.
func (b *DueBounds) forget() {
	b.mu.Lock()
	clear(b.m)
	b.mu.Unlock()
}
