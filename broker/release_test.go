package broker_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestReleaseRoute: POST /v1/queues/{queue}/release gives a delivery back
// uncounted, so a queue with one delivery each keeps the message. A key
// without the consumer role on the queue is refused before the body is
// read, a malformed body is 400, a stale token 409 lock_lost, and a retry
// of a release that succeeded succeeds again. The control abandons the
// same delivery instead: it spends the one delivery and dead-letters the
// message, so the count the test checks is one that can be wrong.
func TestReleaseRoute(t *testing.T) {
	f := start(t, broker.Config{})
	f.tb.Queue(t, "r", mqlite.QueueOptions{MaxDeliveryCount: 1})
	if _, err := outbox.Send(ctx, f.tb.Store, "r", outbox.Message{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	consumer := f.keys["consumer"]
	receive := func() wire.ReceivedMessage {
		t.Helper()
		var got wire.MessagesResponse
		if st := f.call(t, "POST", "/v1/queues/r/receive", consumer, `{"max":1}`, &got); st != 200 || len(got.Messages) != 1 {
			t.Fatalf("receive: %d %+v", st, got)
		}
		return got.Messages[0]
	}
	left := func() mqlite.Message {
		t.Helper()
		msgs, err := f.tb.Store.Peek(ctx, "r", mqlite.PeekParams{})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("peek: %v %+v", err, msgs)
		}
		return msgs[0]
	}
	const path = "/v1/queues/r/release"
	m := receive()
	lock := []byte(fmt.Sprintf(`{"seq":%d,"token":%q}`, m.Seq, m.LockToken))

	elsewhere, _ := f.key(t, keys.Consumer, "q")
	for name, key := range map[string]string{"a consumer over another queue": elsewhere, "a producer": f.keys["producer"]} {
		// A malformed body: the key is refused before it is read.
		if st, e := f.do(t, "POST", path, key, []byte(`{`)); st != http.StatusForbidden || e.Code != wire.CodeForbidden {
			t.Errorf("%s, malformed body: %d %+v, want 403 before the body", name, st, e)
		}
		if st, e := f.do(t, "POST", path, key, lock); st != http.StatusForbidden {
			t.Errorf("%s: %d %+v, want 403", name, st, e)
		}
	}
	for _, body := range []string{`{`, `{"seq":1,"token":"t","delay_ms":5}`, ``, `{"seq":"x"}`} {
		if st, e := f.do(t, "POST", path, consumer, []byte(body)); st != http.StatusBadRequest || e.Code != wire.CodeInvalid {
			t.Errorf("body %q: %d %+v, want 400 invalid", body, st, e)
		}
	}
	stale := []byte(fmt.Sprintf(`{"seq":%d,"token":"0123456789abcdef0123456789abcdef"}`, m.Seq))
	if st, e := f.do(t, "POST", path, consumer, stale); st != http.StatusConflict || e.Code != wire.CodeLockLost {
		t.Errorf("stale token: %d %+v, want 409 lock_lost", st, e)
	}
	if got := left(); got.State != mqlite.StateLocked || got.DeliveryCount != 1 {
		t.Fatalf("after the refused calls: %v with %d deliveries, want locked with 1", got.State, got.DeliveryCount)
	}
	for try := range 2 { // the second is a retry: replayed from the receipt
		if st, e := f.do(t, "POST", path, consumer, lock); st != http.StatusNoContent {
			t.Fatalf("release (try %d): %d %+v, want 204", try+1, st, e)
		}
	}
	if got := left(); got.State != mqlite.StateActive || got.DeliveryCount != 0 {
		t.Fatalf("released: %v with %d deliveries, want active with 0", got.State, got.DeliveryCount)
	}

	// Control: the same delivery abandoned spends the queue's one delivery.
	m = receive()
	if m.DeliveryCount != 1 {
		t.Fatalf("received again: delivery %d, want 1 (the release was not counted)", m.DeliveryCount)
	}
	body := fmt.Sprintf(`{"seq":%d,"token":%q}`, m.Seq, m.LockToken)
	if st, e := f.do(t, "POST", "/v1/queues/r/abandon", consumer, []byte(body)); st != http.StatusNoContent {
		t.Fatalf("abandon: %d %+v", st, e)
	}
	if dead, err := f.tb.Store.PeekDeadLetters(ctx, "r", mqlite.PeekParams{}); err != nil || len(dead) != 1 {
		t.Fatalf("control: abandoned on its last delivery: %v, %d dead letters, want 1", err, len(dead))
	}
}
