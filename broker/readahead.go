package broker

import (
	"context"
	"sync"
)

// maxReadAhead bounds the bytes of a stream's client lines read and not
// yet answered: the reader stops reading past it until a commit answers
// lines, so that a client that writes faster than its lines commit, or
// does not read the answers (a write that waits holds every line behind
// it), holds at most this much of the broker's memory, besides one line
// (MaxStreamLine) being read.
const maxReadAhead = MaxStreamLine

// readAhead counts the bytes of the lines read ahead of their answer.
// Safe for concurrent use: the reader takes, the stream's loop gives.
type readAhead struct {
	mu    sync.Mutex
	max   int
	held  int
	freed chan struct{} // closed (and replaced) when bytes are given back
}

func newReadAhead(max int) *readAhead {
	return &readAhead{max: max, freed: make(chan struct{})}
}

// take counts n more bytes, waiting while they would pass the bound (a
// line alone passes it: MaxStreamLine bounds that), until ctx ends.
func (a *readAhead) take(ctx context.Context, n int) error {
	for {
		a.mu.Lock()
		if a.held == 0 || a.held+n <= a.max {
			a.held += n
			a.mu.Unlock()
			return nil
		}
		freed := a.freed
		a.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives back n bytes take counted.
func (a *readAhead) give(n int) {
	if n == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held -= n
	close(a.freed)
	a.freed = make(chan struct{})
}
