package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
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
// nor event, and each event is handled exactly once when its first delivery
// fails inside the handler's transaction or after its commit.
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
	var out bytes.Buffer
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "shop.db")); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"out of stock: rolled back",
		"order-3 (seq 5, delivery 2): already handled, nothing shipped",
		"webhook order-3 (attempt 2): signature valid",
		"the receiver verified 3 events and rejected 0 requests",
		`now: 3 orders, 3 shipments, 3 processed events; queue "orders": 0 active, 0 dead-lettered; queue "orders.webhook": 0 active, 0 dead-lettered`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
