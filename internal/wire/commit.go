package wire

import "github.com/mqlite/mqlite"

// CommitRequest is the body of POST /v1/commit: completions, rejects and
// sends that commit in one transaction, all or none of them. A request
// with an IdempotencyKey that committed is answered again from its record
// when it comes again (same key, same access key, same items), and commits
// nothing new; the same key with other items is a conflict.
type CommitRequest struct {
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	Complete       []CommitLock   `json:"complete,omitempty"`
	Reject         []CommitReject `json:"reject,omitempty"`
	Send           []CommitSend   `json:"send,omitempty"`
}

// CommitLock is one delivery to complete: its queue, seq and token.
type CommitLock struct {
	Queue string `json:"queue"`
	Seq   int64  `json:"seq"`
	Token string `json:"token"`
}

// Lock decodes the lock.
func (l CommitLock) Lock() mqlite.Lock {
	return mqlite.Lock{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
}

// FromLock encodes a lock.
func FromLock(l mqlite.Lock) CommitLock {
	return CommitLock{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
}

// CommitReject is one delivery to dead-letter, with its reason and
// description.
type CommitReject struct {
	Queue       string `json:"queue"`
	Seq         int64  `json:"seq"`
	Token       string `json:"token"`
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
}

// Lock decodes the lock of the reject.
func (r CommitReject) Lock() mqlite.Lock {
	return mqlite.Lock{Queue: r.Queue, Seq: r.Seq, Token: r.Token}
}

// CommitSend is messages to send to one queue or topic, as the batched
// send route takes them.
type CommitSend struct {
	Queue    string        `json:"queue"`
	Messages []SendMessage `json:"messages"`
}

// CommitResponse is the answer of POST /v1/commit: one entry per entry of
// the request's Send, in order, each with one result per message.
// Replayed is true when the answer comes from the record of an earlier
// request with the same idempotency key.
type CommitResponse struct {
	Sends    []SendBatchResponse `json:"sends"`
	Replayed bool                `json:"replayed,omitempty"`
}
