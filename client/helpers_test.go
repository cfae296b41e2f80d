package client_test

// Helpers of the client's tests: a store with queue "q", a broker over it
// on an httptest server, and a client of that broker on the store's clock.
// The peek-lock promises themselves run over the client in the conformance
// kit (conformance_test.go).

import (
	"context"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
)

// lease is how long a delivery of queue "q" is locked (the default).
const lease = mqlite.DefaultLockDuration

type bundle struct {
	*testdb.Bundle
	src *client.Client
}

func setup(t *testing.T, opts mqlite.QueueOptions) *bundle {
	t.Helper()
	t.Parallel()
	b := testdb.OpenQueue(t, "q", opts)
	url, key := serve(t, b, broker.Config{})
	return &bundle{Bundle: b, src: newClient(t, url, key, b.Clock)}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var ctx = context.Background()

func (b *bundle) receive(t *testing.T, opts mqlite.ReceiveOptions) []mqlite.Message {
	t.Helper()
	msgs, err := b.src.Receive(context.Background(), "q", opts)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return msgs
}
