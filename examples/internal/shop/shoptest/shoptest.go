// Package shoptest is the test suite both examples' order services pass:
// a failed order leaves neither row nor event, every event is handled
// exactly once even when its handler fails the first time, and the webhook
// receiver sees every event, relayed, with a valid signature.
package shoptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/examples/internal/shop"
)

// quiet drops the logs of the Loops and relays under test: the injected
// failures would fill the output.
var quiet = slog.New(slog.DiscardHandler)

// NewFunc returns the service under test on st.
type NewFunc func(t *testing.T, st *mqlite.Store) shop.Service

// Open opens a store on a fresh file with its background loops on, as in
// real use, closes it when the test ends, and returns the service on it
// with 100 books and no piano in stock.
func Open(t *testing.T, newService NewFunc) shop.Service {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "shop.db"), mqlite.Config{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	svc := newService(t, st)
	for item, n := range map[string]int{"book": 100, "piano": 0} {
		if err := svc.Restock(ctx, item, n); err != nil {
			t.Fatal(err)
		}
	}
	return svc
}

// Run runs the suite against the services newService returns.
func Run(t *testing.T, newService NewFunc) {
	t.Run("FailedOrderLeavesNeitherRowNorEvent", func(t *testing.T) {
		t.Parallel()
		failedOrderLeavesNeitherRowNorEvent(t, Open(t, newService))
	})
	t.Run("RelayedWithValidSignatures", func(t *testing.T) {
		t.Parallel()
		relayedWithValidSignatures(t, Open(t, newService))
	})
	for _, stage := range []string{shop.StageInTx, shop.StageAfterCommit} {
		t.Run("EachEventHandledOnce/"+stage, func(t *testing.T) {
			t.Parallel()
			eachEventHandledOnce(t, Open(t, newService), stage)
		})
	}
}

func counts(t *testing.T, svc shop.Service) shop.Counts {
	t.Helper()
	c, err := svc.Counts(context.Background())
	if err != nil {
		t.Fatalf("counts: %v", err)
	}
	return c
}

func failedOrderLeavesNeitherRowNorEvent(t *testing.T, svc shop.Service) {
	ctx := context.Background()
	if _, err := svc.Place(ctx, "book", 1, 1299); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		item string
		want error
	}{{"piano", shop.ErrOutOfStock}, {"harp", shop.ErrUnknownItem}} {
		if _, err := svc.Place(ctx, tc.item, 1, 100); !errors.Is(err, tc.want) {
			t.Fatalf("Place(%s) = %v, want %v", tc.item, err, tc.want)
		}
	}
	if c := counts(t, svc); c.Orders != 1 {
		t.Errorf("orders = %d, want 1 (only the book)", c.Orders)
	}
	msgs, err := svc.Store().Peek(ctx, shop.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].MessageID != "order-1" || msgs[0].Subject != shop.SubjectPlaced {
		t.Fatalf("queue holds %+v, want only order-1's event", msgs)
	}
	relayed, err := svc.Store().Peek(ctx, shop.RelayQueue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(relayed) != 1 || relayed[0].MessageID != "order-1" {
		t.Fatalf("relay queue holds %+v, want only order-1's event", relayed)
	}
}

// relayedWithValidSignatures places orders, relays their events to a
// receiver that answers 503 to each first attempt, and checks that the
// receiver verified every event's signature, got each body as sent, under
// its stable webhook-id, and that the relay queue is empty after. A request
// signed with another secret is refused: the verification is real.
func relayedWithValidSignatures(t *testing.T, svc shop.Service) {
	ctx := context.Background()
	const orders = 5
	for i := range orders {
		if _, err := svc.Place(ctx, "book", 1, int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	sent, err := svc.Store().Peek(ctx, shop.RelayQueue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := shop.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := shop.NewReceiver(secret, shop.ReceiverOptions{FailFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	if err := shop.Relay(ctx, svc.Store(), rcv, secret, orders, quiet); err != nil {
		t.Fatal(err)
	}

	seen, attempts := rcv.Seen(), rcv.Attempts()
	if len(seen) != orders || len(sent) != orders {
		t.Fatalf("receiver saw %d events of %d sent, want %d", len(seen), len(sent), orders)
	}
	for _, m := range sent {
		body, ok := seen[m.MessageID]
		if !ok {
			t.Errorf("receiver never verified %s", m.MessageID)
			continue
		}
		if string(body) != string(m.Body) {
			t.Errorf("%s: receiver got %s, sent %s", m.MessageID, body, m.Body)
		}
		if attempts[m.MessageID] < 2 {
			t.Errorf("%s: %d verified attempts, want the refused one and its retry", m.MessageID, attempts[m.MessageID])
		}
	}
	if n := rcv.Rejected(); n != 0 {
		t.Errorf("receiver rejected %d relayed requests", n)
	}
	qs, err := svc.Store().Stats(ctx, shop.RelayQueue)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Total() != 0 {
		t.Errorf("relay queue still holds %+v", qs)
	}

	// A request signed with another secret.
	other, err := shop.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	forger, err := standardwebhooks.NewWebhook(other)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"order_id":999}`)
	ts := time.Now()
	sig, err := forger.Sign("order-999", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rcv.URL(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(standardwebhooks.HeaderWebhookID, "order-999")
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || rcv.Rejected() != 1 {
		t.Errorf("forged request: status %d, %d rejected; want 401 and 1", resp.StatusCode, rcv.Rejected())
	}
	if _, ok := rcv.Seen()["order-999"]; ok {
		t.Errorf("the forged event was recorded")
	}
}

// eachEventHandledOnce fails the first delivery of every event at stage
// (inside the handler's transaction, so everything rolls back, or after its
// commit, so the acknowledgement is lost) and checks that each order still
// ships exactly once and each event is completed.
func eachEventHandledOnce(t *testing.T, svc shop.Service, stage string) {
	ctx := context.Background()
	const orders = 20
	for i := range orders {
		if _, err := svc.Place(ctx, "book", 1, int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	reached := map[string]int{}
	svc.SetFault(func(s string, m mqlite.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if s != stage {
			return nil
		}
		reached[m.MessageID]++
		if m.DeliveryCount == 1 {
			return fmt.Errorf("injected failure %s", stage)
		}
		return nil
	})
	opts := shop.LoopConfig()
	opts.Logger = quiet
	if err := shop.Drain(ctx, svc, orders, opts); err != nil {
		t.Fatal(err)
	}
	c := counts(t, svc)
	if c.Shipments != orders || c.ShippedTwice != 0 || c.Processed != orders {
		t.Errorf("counts %+v, want %d shipments, none twice, %d processed events", c, orders, orders)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reached) != orders {
		t.Errorf("the fault saw %d events, want %d", len(reached), orders)
	}
	// In the transaction both deliveries reach the stage; after the commit
	// the second is a duplicate and returns before it.
	want := map[string]int{shop.StageInTx: 2, shop.StageAfterCommit: 1}[stage]
	for id, n := range reached {
		if n != want {
			t.Errorf("%s reached %s %d times, want %d", id, stage, n, want)
		}
	}
	qs, err := svc.Store().Stats(ctx, shop.Queue)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Total() != 0 {
		t.Errorf("queue still holds %+v", qs)
	}
}

// Demo runs an example's run (shop.Demo on a file in t.TempDir()) and
// checks its output for what every example shows, and for want.
func Demo(t *testing.T, run func(ctx context.Context, w io.Writer, path string) error, want ...string) {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "shop.db")); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, w := range append([]string{
		"out of stock: rolled back",
		"order-3 (seq 5, delivery 2): already handled, nothing shipped",
		"webhook order-3 (attempt 2): signature valid",
		"the receiver verified 3 events and rejected 0 requests",
		`now: 3 orders, 3 shipments, 3 processed events; queue "orders": 0 active, 0 dead-lettered; queue "orders.webhook": 0 active, 0 dead-lettered`,
	}, want...) {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
