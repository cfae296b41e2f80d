package broker

import (
	"context"
	"errors"
	"sync"
)

// errRevoked is the cause of a waiting receive's cancellation when its key
// is revoked.
var errRevoked = errors.New("broker: the access key was revoked")

// waiters are the receives waiting now, by key id, so that a revocation
// ends the waits of its key at once: a key revoked while
// its receive waits must not get what is sent afterwards.
type waiters struct {
	mu      sync.Mutex
	byKey   map[string]map[*context.CancelCauseFunc]struct{}
	revoked map[string]bool // ids revoked through this broker
}

// add registers the wait of key id, ended by cancel; remove unregisters it.
// ok is false when id was revoked meanwhile: the receive must not wait.
func (w *waiters) add(id string, cancel context.CancelCauseFunc) (remove func(), ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.revoked[id] {
		return nil, false
	}
	if w.byKey == nil {
		w.byKey = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	if w.byKey[id] == nil {
		w.byKey[id] = map[*context.CancelCauseFunc]struct{}{}
	}
	p := &cancel
	w.byKey[id][p] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.byKey[id], p)
		if len(w.byKey[id]) == 0 {
			delete(w.byKey, id)
		}
	}, true
}

// revoke ends every wait of key id with errRevoked, and refuses the waits
// that would begin from now on, until unrevoke.
func (w *waiters) revoke(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.revoked == nil {
		w.revoked = map[string]bool{}
	}
	w.revoked[id] = true
	for p := range w.byKey[id] {
		(*p)(errRevoked)
	}
}

// unrevoke undoes revoke, for a revocation that failed.
func (w *waiters) unrevoke(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.revoked, id)
}
