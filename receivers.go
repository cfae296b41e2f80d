package mqlite

import (
	"context"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/mqlite/mqlite/internal/receivers"
)

// ReceiverGrace is how long a receiver that neither waits in a Receive nor
// holds a lock stays in Store.Receivers after it was last seen (by the
// store's Clock): the gap between two receives of a consumer at work.
const ReceiverGrace = 5 * time.Second

// ReceiverTag names who calls Receive, for Store.Receivers. Name tells two
// receivers of one key and address apart (consumer.Loop names each of its
// loops; the broker takes the client's instance); KeyID and Addr are the
// broker's: the access key and the remote host of a remote receiver.
type ReceiverTag struct {
	Name  string
	KeyID string
	Addr  string
}

// inProcess is the tag of a Receive whose ctx carries none.
var inProcess = ReceiverTag{Name: "in-process"}

type receiverKey struct{}

// WithReceiver returns ctx tagged with t: the Receive and ReceiveDeferred
// calls made with it are counted under t in Store.Receivers. An untagged
// call counts under the name "in-process".
func WithReceiver(ctx context.Context, t ReceiverTag) context.Context {
	return context.WithValue(ctx, receiverKey{}, t)
}

// receiverOf returns the tag of ctx, or inProcess.
func receiverOf(ctx context.Context) ReceiverTag {
	if t, ok := ctx.Value(receiverKey{}).(ReceiverTag); ok {
		return t
	}
	return inProcess
}

// WorkerOf names who settles a delivery with ctx, for the attempt an
// Abandon or a Reject records in the message's history (Attempt.Worker):
// the ReceiverTag of ctx (WithReceiver) as "name" with "@addr" when the
// tag has an address (the broker's remote receivers: the client's
// instance at its host), preceded by this process's "host:pid/" when it
// has none (consumer.Loop's "loop-N"); for a ctx with no tag, this
// process's "host:pid".
func WorkerOf(ctx context.Context) string {
	t, ok := ctx.Value(receiverKey{}).(ReceiverTag)
	switch {
	case !ok || t.Name == "" && t.Addr == "":
		return hostPID
	case t.Addr != "":
		return t.Name + "@" + t.Addr
	default:
		return hostPID + "/" + t.Name
	}
}

// hostPID is this process's "host:pid", the worker of an untagged call.
var hostPID = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}()

// Receiver is one receiver of one queue, as Store.Receivers reports it.
type Receiver struct {
	Queue string
	ReceiverTag
	// Waiting is how many of its Receive calls are running now (waiting
	// for a message, or claiming).
	Waiting int
	// Locks is how many of the deliveries it received hold a running
	// lease: not settled, not deferred, not past their lease.
	Locks int
	// LastSeen is when it last called Receive, or a Receive of it ended.
	LastSeen time.Time
}

// leaseOf is the lease of a delivery, for the registry of Receivers.
func leaseOf(m Message) receivers.Lease {
	return receivers.Lease{Token: m.LockToken, Seq: m.Seq, Until: millis(m.LockedUntil)}
}

// listReceivers returns the live receivers of the registry, sorted by
// queue, key, address and name, and forgets those gone (and the lapsed
// leases).
func (s *Store) listReceivers() []Receiver {
	entries := s.receivers.List()
	out := make([]Receiver, len(entries))
	for i, e := range entries {
		out[i] = Receiver{Queue: e.Queue, ReceiverTag: e.Tag, Waiting: e.Waiting, Locks: e.Locks, LastSeen: fromMillis(e.LastSeen)}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if a.KeyID != b.KeyID {
			return a.KeyID < b.KeyID
		}
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.Name < b.Name
	})
	return out
}

// Receivers returns the live receivers of every queue, sorted by queue: the
// in-process ones (consumer.Loop, each loop by name; "in-process" for a
// Receive whose ctx carries no ReceiverTag) and the broker's remote ones
// (by key id, address and client instance), each with how many of its
// receives wait now, how many leases it holds and when it was last seen. A
// receiver is live while it waits, holds a lease, or was seen within
// ReceiverGrace. The registry is kept in memory from the store's own calls:
// it reads no table, and starts empty at Open.
func (s *Store) Receivers(ctx context.Context) ([]Receiver, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.listReceivers(), nil
}

// receiversOf returns the receivers of queue among all.
func receiversOf(all []Receiver, queue string) []Receiver {
	var out []Receiver
	for _, r := range all {
		if r.Queue == queue {
			out = append(out, r)
		}
	}
	return out
}
