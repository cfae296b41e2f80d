package broker_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestPauseOverHTTP: an admin pauses a queue (the answer and the store say
// so), a receive then gets nothing though a message waits, a body is
// refused with nothing changed, and the resume hands the message out.
func TestPauseOverHTTP(t *testing.T) {
	f := start(t, broker.Config{})
	err := f.tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("m")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	resp := f.send(t, "POST", "/v1/queues/q/pause", f.keys["admin"], nil)
	var info wire.QueueInfo
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(data, &info); err != nil || resp.StatusCode != http.StatusOK || info.PausedAt.IsZero() {
		t.Fatalf("pause: %d %s", resp.StatusCode, data)
	}
	if q, err := f.tb.Store.GetQueue(ctx, "q"); err != nil || !q.Paused() {
		t.Fatalf("store after pause: %+v %v", q, err)
	}
	receive := func() int {
		resp := f.send(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], []byte(`{"max":10}`))
		defer resp.Body.Close()
		var out wire.MessagesResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("receive: %d %v", resp.StatusCode, err)
		}
		return len(out.Messages)
	}
	if n := receive(); n != 0 {
		t.Fatalf("receive while paused: %d messages", n)
	}
	if status, e := f.do(t, "POST", "/v1/queues/q/resume", f.keys["admin"], []byte(`{}`)); status != http.StatusBadRequest || e.Reason != wire.ReasonMalformed {
		t.Fatalf("resume with a body: %d %+v", status, e)
	}
	if q, _ := f.tb.Store.GetQueue(ctx, "q"); !q.Paused() {
		t.Fatal("a refused resume resumed the queue")
	}
	if status, _ := f.do(t, "POST", "/v1/queues/q/resume", f.keys["admin"], nil); status != http.StatusOK {
		t.Fatalf("resume: %d", status)
	}
	if n := receive(); n != 1 {
		t.Fatalf("receive after resume: %d messages", n)
	}
}
