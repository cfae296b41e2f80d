package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/mqlite/mqlite/internal/wire"
)

// Key describes an access key (never its secret).
type Key struct {
	// ID names the key; RevokeKey takes it.
	ID string `json:"id"`
	// Role is "producer", "consumer" or "admin".
	Role string `json:"role"`
	// Queues are the queue names (or "*") the key covers.
	Queues []string `json:"queues"`
	// CreatedAt is when the key was made.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the key was revoked; zero while it is live.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// CreateKey makes an access key with role ("producer", "consumer" or
// "admin") on queues ("*" for all) and returns it with its secret, which
// cannot be shown again. Needs an admin key over every queue.
func (c *Client) CreateKey(ctx context.Context, role string, queues []string) (Key, string, error) {
	var out wire.CreateKeyResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/keys", in: wire.CreateKeyRequest{Role: role, Queues: queues}, out: &out})
	return Key(out.Key), out.Secret, err
}

// ListKeys returns every access key, revoked ones included.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out wire.KeysResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/keys", out: &out}); err != nil {
		return nil, err
	}
	return convert(out.Keys, func(k wire.Key) Key { return Key(k) }), nil
}

// WhoAmI returns the client's own key (never its secret) and the names of
// the queues it covers, in name order: what the key may use.
func (c *Client) WhoAmI(ctx context.Context) (Key, []string, error) {
	var out wire.WhoAmIResponse
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/whoami", out: &out})
	return Key(out.Key), out.Queues, err
}

// RevokeKey revokes the key id; it is refused from then on.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(id)})
}
