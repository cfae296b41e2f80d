package driver

// AccessKey is one row of the broker's access keys: the id, the SHA-256 of
// the secret (never the secret), the scope as JSON, and when it was
// created and revoked (epoch ms; 0 while it is valid).
type AccessKey struct {
	ID         string
	SecretHash []byte
	Scopes     string
	CreatedAt  int64
	RevokedAt  int64
}
