package wire

// RedriveRequest is the body of redrive; no seqs means every dead letter.
type RedriveRequest struct {
	Seqs []int64 `json:"seqs,omitempty"`
}
