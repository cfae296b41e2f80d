package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/buildinfo"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// requireAll checks for an admin key over every queue: keys are a power
// over the whole broker.
func requireAll(ctx context.Context) error {
	if err := require(ctx, keys.Admin, ""); err != nil {
		return err
	}
	if k := keyOf(ctx); !k.Scope.AllQueues() {
		return &apiError{wire.CodeForbidden, wire.ReasonQueue, fmt.Sprintf("key %s does not cover every queue (%q)", k.ID, keys.AllQueues)}
	}
	return nil
}

func fromKey(k keys.Key) wire.Key {
	return wire.Key{ID: k.ID, Role: string(k.Scope.Role), Queues: k.Scope.Queues, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

func (s *Server) listKeys(r *http.Request) (result, error) {
	if err := requireAll(r.Context()); err != nil {
		return result{}, err
	}
	ks, err := keys.List(r.Context(), s.st)
	if err != nil {
		return result{}, err
	}
	out := wire.KeysResponse{Keys: []wire.Key{}}
	for _, k := range ks {
		out.Keys = append(out.Keys, fromKey(k))
	}
	return ok(out)
}

func (s *Server) createKey(r *http.Request) (result, error) {
	req, err := decode[wire.CreateKeyRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := requireAll(r.Context()); err != nil {
		return result{}, err
	}
	k, secret, err := keys.Create(r.Context(), s.st, keys.Scope{Role: keys.Role(req.Role), Queues: req.Queues})
	if errors.Is(err, keys.ErrInvalidScope) {
		return result{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: err.Error()}
	}
	if err != nil {
		return result{}, err
	}
	return created(wire.CreateKeyResponse{Key: fromKey(k), Secret: secret})
}

func (s *Server) revokeKey(r *http.Request) (result, error) {
	if err := requireAll(r.Context()); err != nil {
		return result{}, err
	}
	id := r.PathValue("id")
	s.waiting.revoke(id) // its waiting receives end now, before anything is sent after
	err := keys.Revoke(r.Context(), s.st, id)
	s.forget(id)
	if err != nil {
		s.waiting.unrevoke(id)
	}
	if errors.Is(err, keys.ErrNotFound) {
		return result{}, &apiError{wire.CodeNotFound, wire.ReasonKeyNotFound, err.Error()}
	}
	if err != nil {
		return result{}, err
	}
	return noContent()
}

// whoami answers any valid key with its id, role and scope, the names of
// the queues it covers (the dashboard hides what the key may not use; the
// endpoints refuse it anyway) and the broker's mqlite version.
func (s *Server) whoami(r *http.Request) (result, error) {
	qs, err := s.st.ListQueues(r.Context())
	if err != nil {
		return result{}, err
	}
	name := func(q mqlite.QueueInfo) string { return q.Name }
	return ok(wire.WhoAmIResponse{Key: fromKey(keyOf(r.Context())), Queues: covered(r, qs, name, name), Version: buildinfo.Version()})
}
