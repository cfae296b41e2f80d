package main

import (
	"context"
	"io"
	"testing"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/examples/internal/shop"
	"github.com/mqlite/mqlite/examples/internal/shop/shoptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestService runs the examples' suite: a failed order leaves neither row
// nor event, each event is handled exactly once when its first delivery
// fails inside the handler's transaction or after its commit, and the
// webhook receiver verifies every relayed event's signature.
func TestService(t *testing.T) {
	t.Parallel()
	shoptest.Run(t, func(t *testing.T, st *mqlite.Store) shop.Service {
		svc, err := NewService(context.Background(), st, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	})
}

func TestRun(t *testing.T) {
	t.Parallel()
	shoptest.Demo(t, run)
}
