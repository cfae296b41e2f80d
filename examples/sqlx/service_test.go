package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup opens a store on a fresh file with its background loops on, as in
// real use, and a service on it with some stock.
func setup(t *testing.T) *Service {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "shop.db"), mqlite.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	svc, err := NewService(ctx, st, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	for item, n := range map[string]int{"book": 100, "piano": 0} {
		if err := svc.Restock(ctx, item, n); err != nil {
			t.Fatal(err)
		}
	}
	return svc
}

func count(t *testing.T, svc *Service, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := svc.db.GetContext(context.Background(), &n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestFailedOrderLeavesNeitherRowNorEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := setup(t)
	if _, err := svc.PlaceOrder(ctx, "book", 1, 1299); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		item string
		want error
	}{{"piano", ErrOutOfStock}, {"harp", ErrUnknownItem}} {
		if _, err := svc.PlaceOrder(ctx, tc.item, 1, 100); !errors.Is(err, tc.want) {
			t.Fatalf("PlaceOrder(%s) = %v, want %v", tc.item, err, tc.want)
		}
	}
	if n := count(t, svc, `SELECT count(*) FROM orders`); n != 1 {
		t.Errorf("orders = %d, want 1 (only the book)", n)
	}
	if n := count(t, svc, `SELECT count(*) FROM orders WHERE item IN ('piano', 'harp')`); n != 0 {
		t.Errorf("failed orders left %d rows", n)
	}
	msgs, err := svc.st.Peek(ctx, Queue, mqlite.PeekOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].MessageID != "order-1" || msgs[0].Subject != SubjectPlaced {
		t.Fatalf("queue holds %+v, want only order-1's event", msgs)
	}
}

// TestEachEventHandledOnce fails the first delivery of every event, once
// before the handler's commit (everything rolls back) and once after it
// (the acknowledgement is lost), and checks that each order still ships
// exactly once and each event is completed.
func TestEachEventHandledOnce(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{stageInTx, stageAfterCommit} {
		t.Run(stage, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			svc := setup(t)
			const orders = 20
			for i := range orders {
				if _, err := svc.PlaceOrder(ctx, "book", 1, int64(1000+i)); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			deliveries := map[string]int{}
			svc.fault = func(s string, m mqlite.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if s != stage {
					return nil
				}
				deliveries[m.MessageID]++
				if m.DeliveryCount == 1 {
					return fmt.Errorf("injected failure %s", stage)
				}
				return nil
			}
			if err := drain(ctx, svc, orders, loopOptions); err != nil {
				t.Fatal(err)
			}
			if n := count(t, svc, `SELECT count(*) FROM shipments`); n != orders {
				t.Errorf("shipments = %d, want %d", n, orders)
			}
			if n := count(t, svc, `SELECT count(*) FROM (SELECT order_id FROM shipments GROUP BY order_id HAVING count(*) > 1)`); n != 0 {
				t.Errorf("%d orders shipped more than once", n)
			}
			if n := count(t, svc, `SELECT count(*) FROM processed_events`); n != orders {
				t.Errorf("processed events = %d, want %d", n, orders)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(deliveries) != orders {
				t.Errorf("the fault saw %d events, want %d", len(deliveries), orders)
			}
			for id, n := range deliveries {
				// in-tx: both deliveries reach the stage; after-commit: the
				// second is a duplicate and returns before it.
				want := map[string]int{stageInTx: 2, stageAfterCommit: 1}[stage]
				if n != want {
					t.Errorf("%s reached %s %d times, want %d", id, stage, n, want)
				}
			}
			qs, err := svc.st.Stats(ctx, Queue)
			if err != nil {
				t.Fatal(err)
			}
			if qs.Total() != 0 {
				t.Errorf("queue still holds %+v", qs)
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "shop.db")); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"out of stock: rolled back",
		"order-3 (seq 3, delivery 2): already handled, nothing shipped",
		"now: 3 orders, 3 shipments, 3 processed events; queue \"orders\": 0 active",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
