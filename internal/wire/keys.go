package wire

import "time"

// WhoAmIResponse is the response of GET /v1/whoami: the presented key
// (never its secret), the names of the queues it covers, so a client such
// as the dashboard can show only what the key may use, and the broker's
// mqlite version.
type WhoAmIResponse struct {
	Key    Key      `json:"key"`
	Queues []string `json:"queues"`
	// Version is the version of mqlite the broker was built with ("v0.1.0"),
	// or "(devel)" for a build from a checkout.
	Version string `json:"version"`
}

// CreateKeyRequest is the body of an access key creation.
type CreateKeyRequest struct {
	Role   string   `json:"role"`
	Queues []string `json:"queues"`
}

// Key describes an access key; never its secret.
type Key struct {
	ID        string    `json:"id"`
	Role      string    `json:"role"`
	Queues    []string  `json:"queues"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// CreateKeyResponse is the response of a key creation: the only time the
// secret is shown.
type CreateKeyResponse struct {
	Key    Key    `json:"key"`
	Secret string `json:"secret"`
}

// KeysResponse is the response of the key listing.
type KeysResponse struct {
	Keys []Key `json:"keys"`
}
