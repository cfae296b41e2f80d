package wire

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
