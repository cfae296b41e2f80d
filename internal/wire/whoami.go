package wire

// WhoAmIResponse is the response of GET /v1/whoami: the presented key
// (never its secret) and the names of the queues it covers, so a client
// such as the dashboard can show only what the key may use.
type WhoAmIResponse struct {
	Key    Key      `json:"key"`
	Queues []string `json:"queues"`
}
