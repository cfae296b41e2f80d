package wire

// StreamSettle is one line a client writes on a stream (POST
// /v1/queues/{queue}/stream, newline-delimited JSON both ways): the
// settlements of deliveries the stream handed out, and the seqs to
// release (deliveries the client gives up on without settling, such as a
// lease it lost), each of which frees a place in the window. The broker
// answers each line with one StreamEvent whose Line is its number.
type StreamSettle struct {
	Complete []LockRequest    `json:"complete,omitempty"`
	Abandon  []AbandonRequest `json:"abandon,omitempty"`
	Reject   []RejectRequest  `json:"reject,omitempty"`
	Release  []int64          `json:"release,omitempty"`
}

// Items is how many settlements and releases the line carries.
func (s StreamSettle) Items() int {
	return len(s.Complete) + len(s.Abandon) + len(s.Reject) + len(s.Release)
}

// StreamEvent is one line the broker writes on a stream: messages handed
// out, the results of the client's line number Line (one per settlement,
// completes then abandons then rejects, in order), or the error that ends
// the stream.
type StreamEvent struct {
	Messages []ReceivedMessage `json:"messages,omitempty"`
	Line     int64             `json:"line,omitempty"`
	Results  []ItemResult      `json:"results,omitempty"`
	Error    *Error            `json:"error,omitempty"`
}
