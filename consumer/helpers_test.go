package consumer_test

// Helpers of the consumer's tests: a store with queue "q" on a fake clock.
// The peek-lock promises themselves (fencing, receipts, order, attempts,
// the delivery bound) are pinned by the conformance kit, for the store and
// for the client; the store's own checks sit beside its code, in the root
// package's tests.

import (
	"context"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

const lease = 30 * time.Second

var ctx = context.Background()

type bundle struct {
	*testdb.Bundle
	src consumer.Source
}

// setup opens a store with queue "q" (LockDuration lease unless opts says)
// for a parallel test.
func setup(t *testing.T, opts mqlite.QueueOptions) *bundle {
	t.Helper()
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	if opts.LockDuration == 0 {
		opts.LockDuration = lease
	}
	b.Queue(t, "q", opts)
	return &bundle{Bundle: b, src: b.Store}
}

// send sends msgs to "q" in one transaction and returns their seqs.
func (b *bundle) send(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	return b.Send(t, "q", msgs...)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
