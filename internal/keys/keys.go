// Package keys manages the broker's access keys in the store's access_keys
// table: creation (the secret is returned once and only its hash is kept),
// listing, revocation, and authentication of a presented key.
//
// A key reads "mqlite_<id>_<secret>": id is 16 hex digits, public, the row's
// primary key; secret is 32 random bytes in unpadded base64url. The table
// keeps SHA-256 of the secret. A fast hash is enough because the secret is
// 256 bits of crypto/rand, not a password: there is nothing to guess from a
// leaked hash. The hash is compared with crypto/subtle in constant time.
//
// scopes holds JSON: {"role":"consumer","queues":["orders"]}, where "*" in
// queues means every queue and topic.
package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/driver"
)

// Role is what a key may do.
type Role string

// The roles. Admin may do everything, on the queues of its scope; Consumer
// receives, settles and peeks; Producer sends; Worker does both, what a
// pipeline stage needs (receive from one queue, send to another, settle
// and send in one commit), and administers nothing.
const (
	Producer Role = "producer"
	Consumer Role = "consumer"
	Worker   Role = "worker"
	Admin    Role = "admin"
)

// AllQueues in Scope.Queues grants every queue and topic.
const AllQueues = "*"

// prefix starts every key.
const prefix = "mqlite_"

var (
	// ErrUnauthorized: a key that is malformed, unknown or revoked.
	ErrUnauthorized = errors.New("keys: unknown or revoked key")
	// ErrNotFound: no key with that id.
	ErrNotFound = errors.New("keys: key not found")
	// ErrInvalidScope: an unknown role, or no queue.
	ErrInvalidScope = errors.New("keys: invalid scope")
)

// Scope is a key's grant: one role on some queues.
type Scope struct {
	Role   Role     `json:"role"`
	Queues []string `json:"queues"`
}

// Validate checks the role and that there is at least one queue name.
func (s Scope) Validate() error {
	switch s.Role {
	case Producer, Consumer, Worker, Admin:
	default:
		return fmt.Errorf("%w: unknown role %q (producer, consumer, worker or admin)", ErrInvalidScope, s.Role)
	}
	if len(s.Queues) == 0 {
		return fmt.Errorf("%w: no queue (name one, or %q for all)", ErrInvalidScope, AllQueues)
	}
	for _, q := range s.Queues {
		if q == "" || len(q) > mqlite.MaxQueueNameLen {
			return fmt.Errorf("%w: bad queue name %q", ErrInvalidScope, q)
		}
	}
	return nil
}

// HasRole reports whether the scope's role includes r: admin includes every
// role, worker producer and consumer; the others only themselves.
func (s Scope) HasRole(r Role) bool {
	switch s.Role {
	case Admin:
		return true
	case Worker:
		return r == Worker || r == Producer || r == Consumer
	}
	return s.Role == r
}

// HasQueue reports whether the scope covers queue.
func (s Scope) HasQueue(queue string) bool {
	return slices.Contains(s.Queues, AllQueues) || slices.Contains(s.Queues, queue)
}

// AllQueues reports whether the scope covers every queue.
func (s Scope) AllQueues() bool { return slices.Contains(s.Queues, AllQueues) }

// Key is one access key, without its secret.
type Key struct {
	ID        string
	Scope     Scope
	CreatedAt time.Time
	// RevokedAt is when the key was revoked; zero while it is valid.
	RevokedAt time.Time
}

// Create makes a key with scope and returns it with its secret, the whole
// string to present as "Authorization: Bearer <secret>". The secret is not
// stored and cannot be shown again. Create is safe for concurrent use.
func Create(ctx context.Context, st *mqlite.Store, scope Scope) (Key, string, error) {
	if err := scope.Validate(); err != nil {
		return Key{}, "", err
	}
	var idb [8]byte
	var sec [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return Key{}, "", fmt.Errorf("keys: random id: %w", err)
	}
	if _, err := rand.Read(sec[:]); err != nil {
		return Key{}, "", fmt.Errorf("keys: random secret: %w", err)
	}
	id := hex.EncodeToString(idb[:])
	secret := base64.RawURLEncoding.EncodeToString(sec[:])
	hash := sha256.Sum256([]byte(secret))
	scopes, err := json.Marshal(scope)
	if err != nil {
		return Key{}, "", fmt.Errorf("keys: encode scope: %w", err)
	}
	now := st.Clock().Now().UTC().Truncate(time.Millisecond)
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		return driver.Of(tx.SQL()).CreateKey(tx.Context(), tx.SQL(),
			driver.AccessKey{ID: id, SecretHash: hash[:], Scopes: string(scopes), CreatedAt: now.UnixMilli()})
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("keys: create: %w", err)
	}
	return Key{ID: id, Scope: scope, CreatedAt: now}, prefix + id + "_" + secret, nil
}

// List returns every key, revoked ones included, oldest first.
func List(ctx context.Context, st *mqlite.Store) ([]Key, error) {
	var out []Key
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		rows, err := driver.Of(tx.SQL()).ListKeys(tx.Context(), tx.SQL())
		if err != nil {
			return err
		}
		for _, r := range rows {
			k := Key{ID: r.ID, CreatedAt: time.UnixMilli(r.CreatedAt).UTC()}
			if err := json.Unmarshal([]byte(r.Scopes), &k.Scope); err != nil {
				return fmt.Errorf("key %s: scopes: %w", k.ID, err)
			}
			if r.RevokedAt != 0 {
				k.RevokedAt = time.UnixMilli(r.RevokedAt).UTC()
			}
			out = append(out, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	return out, nil
}

// Revoke revokes the key id: from now on it is refused. Revoking a revoked
// key changes nothing and is not an error; an unknown id is ErrNotFound.
func Revoke(ctx context.Context, st *mqlite.Store, id string) error {
	now := st.Clock().Now().UnixMilli()
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		found, err := driver.Of(tx.SQL()).RevokeKey(tx.Context(), tx.SQL(), id, max(now, 1))
		if err == nil && !found {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("keys: revoke: %w", err)
	}
	return err
}

// parse splits a presented key into its id and secret.
func parse(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 43 {
		return "", "", false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", "", false
	}
	return id, secret, true
}

// dummyHash is compared when the id is unknown, so that an unknown id and a
// wrong secret take the same time.
var dummyHash = sha256.Sum256([]byte("mqlite: no such key"))

// Authenticate returns the valid key whose secret is token, or an error
// matching ErrUnauthorized (malformed, unknown or revoked). The secret's
// hash is compared in constant time.
func Authenticate(ctx context.Context, st *mqlite.Store, token string) (Key, error) {
	id, secret, ok := parse(token)
	if !ok {
		return Key{}, ErrUnauthorized
	}
	var row driver.AccessKey
	var found bool
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		row, found, err = driver.Of(tx.SQL()).GetKey(tx.Context(), tx.SQL(), id)
		return err
	})
	got := sha256.Sum256([]byte(secret))
	if err != nil {
		return Key{}, fmt.Errorf("keys: authenticate: %w", err)
	}
	if !found {
		subtle.ConstantTimeCompare(got[:], dummyHash[:])
		return Key{}, ErrUnauthorized
	}
	if subtle.ConstantTimeCompare(got[:], row.SecretHash) != 1 || row.RevokedAt != 0 {
		return Key{}, ErrUnauthorized
	}
	k := Key{ID: id, CreatedAt: time.UnixMilli(row.CreatedAt).UTC()}
	if err := json.Unmarshal([]byte(row.Scopes), &k.Scope); err != nil {
		return Key{}, fmt.Errorf("keys: key %s: scopes: %w", id, err)
	}
	return k, nil
}
