package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/mqlite/mqlite"
)

// CommitRequest is the body of POST /v1/commit: completions, rejects and
// sends that commit in one transaction, all or none of them. A request
// with an IdempotencyKey that committed is answered again from its record
// when it comes again (same key, same access key, same items), and commits
// nothing new; the same key with other items is a conflict. A request
// without one that settles a delivery takes LocksKey's.
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

// LocksKeyPrefix starts every key LocksKey derives.
const LocksKeyPrefix = "locks:"

// LocksKey is the idempotency key of a request that names none: derived
// from the set of deliveries (queue, seq, token) it completes or rejects,
// in any order, so that the same request sent again without a key replays
// the first answer. A token is its delivery's alone, so no other request
// settling anything derives the same key. A request that settles nothing
// derives none ("").
func (r CommitRequest) LocksKey() string {
	locks := make([]string, 0, len(r.Complete)+len(r.Reject))
	add := func(queue string, seq int64, token string) {
		locks = append(locks, strconv.Quote(queue)+" "+strconv.FormatInt(seq, 10)+" "+strconv.Quote(token))
	}
	for _, c := range r.Complete {
		add(c.Queue, c.Seq, c.Token)
	}
	for _, rj := range r.Reject {
		add(rj.Queue, rj.Seq, rj.Token)
	}
	if len(locks) == 0 {
		return ""
	}
	slices.Sort(locks)
	h := sha256.New()
	for _, l := range locks {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return LocksKeyPrefix + hex.EncodeToString(h.Sum(nil))
}
