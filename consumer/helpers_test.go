package consumer_test

// Helpers of the consumer's tests: a store with queue "q" on a fake clock.
// The peek-lock promises themselves (fencing, receipts, order, attempts,
// the delivery bound) are pinned by the conformance kit, for the store and
// for the client; the store's own checks sit beside its code, in the root
// package's tests.

import (
	"context"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
)

// lease is how long a delivery of queue "q" is locked (the default).
const lease = mqlite.DefaultLockDuration

var ctx = context.Background()

type bundle struct {
	*testdb.Bundle
	src consumer.Store
}

// setup opens a store with queue "q" for a parallel test; its leases
// last lease unless opts says.
func setup(t *testing.T, opts mqlite.QueueOptions) *bundle {
	t.Helper()
	t.Parallel()
	b := testdb.OpenQueue(t, "q", opts)
	return &bundle{Bundle: b, src: b.Store}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
