package wire

// FindResponse is the response of find: the page's matches, where the next
// page starts (0: the queue is done) and how many messages it examined.
type FindResponse struct {
	Messages []ReceivedMessage `json:"messages"`
	NextSeq  int64             `json:"next_seq"`
	Scanned  int               `json:"scanned"`
}
