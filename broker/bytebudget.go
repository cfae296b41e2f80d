package broker

import (
	"context"
	"sync"
)

// byteBudget counts bytes held against a bound: a stream's lines read
// ahead of their answers, the answers that carry messages. Safe for
// concurrent use.
type byteBudget struct {
	mu    sync.Mutex
	max   int
	held  int
	freed chan struct{} // closed (and replaced) when bytes are given back
}

func newByteBudget(max int) *byteBudget {
	return &byteBudget{max: max, freed: make(chan struct{})}
}

// take counts n more bytes, waiting while they would pass the bound, until
// ctx ends. Bytes alone pass it (nothing else held): one line, one answer
// is never refused for its size.
func (a *byteBudget) take(ctx context.Context, n int) error {
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
func (a *byteBudget) give(n int) {
	if n == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held -= n
	close(a.freed)
	a.freed = make(chan struct{})
}

// exchange turns from bytes counted into to, without waiting: for what is
// in memory already, whose room was taken before (an answer read within
// the room it held). It may pass the bound by the difference.
func (a *byteBudget) exchange(from, to int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held += to - from
	if to < from {
		close(a.freed)
		a.freed = make(chan struct{})
	}
}
