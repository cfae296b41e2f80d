package broker

import "sync"

// slots are the places of the receives that wait: Config.MaxLongPolls in
// all, of which one key holds at most Config.MaxLongPollsPerKey, so that
// one key's waits cannot take every place and refuse every other key's.
// A long-poll holds one while it runs; a stream holds one only while it
// waits for a message, never while it waits for its client's lines. Safe
// for concurrent use.
type slots struct {
	mu     sync.Mutex
	total  int            // Config.MaxLongPolls
	perKey int            // Config.MaxLongPollsPerKey
	used   int            // places held
	byKey  map[string]int // places held, by key id
	freed  chan struct{}  // closed (and replaced) when a place is given back
}

func newSlots(total, perKey int) *slots {
	return &slots{total: total, perKey: perKey, byKey: map[string]int{}, freed: make(chan struct{})}
}

// take takes a place for key, and reports whether one was left: false when
// every place is held, or key holds its share.
func (s *slots) take(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.total || s.byKey[key] >= s.perKey {
		return false
	}
	s.used++
	s.byKey[key]++
	return true
}

// give gives back a place key took.
func (s *slots) give(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}

// released returns a channel closed when a place is next given back: take
// it before a take that fails, and wait on it to try again.
func (s *slots) released() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}
