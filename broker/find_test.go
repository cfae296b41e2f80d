package broker_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestFindOverHTTP: a consumer finds by subject and MessageID; the dead
// letters need an admin key (403 otherwise); bad queries are refused.
func TestFindOverHTTP(t *testing.T) {
	f := start(t, broker.Config{})
	err := f.tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", []outbox.Message{
			{Body: []byte("a"), Subject: "order.placed", MessageID: "o-1"},
			{Body: []byte("b"), Subject: "invoice.sent", MessageID: "i-1"},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	find := func(query, key string) (int, wire.FindResponse) {
		resp := f.send(t, "GET", "/v1/queues/q/find?"+query, f.keys[key], nil)
		defer resp.Body.Close()
		var out wire.FindResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, tc := range []struct {
		query, key string
		status     int
		ids        []string
	}{
		{"subject_prefix=order.", "consumer", 200, []string{"o-1"}},
		{"message_id=i-1", "consumer", 200, []string{"i-1"}},
		{"state=dead_lettered", "consumer", 403, nil},
		{"state=dead_lettered", "admin", 200, []string{}},
		{"state=nope", "admin", 400, nil},
		{"bogus=1", "admin", 400, nil},
		{"max=1&max=2", "admin", 400, nil},
		{"scan_max=100001", "admin", 400, nil},
	} {
		status, out := find(tc.query, tc.key)
		if status != tc.status {
			t.Errorf("%s as %s: %d, want %d", tc.query, tc.key, status, tc.status)
			continue
		}
		if tc.ids == nil {
			continue
		}
		var got []string
		for _, m := range out.Messages {
			got = append(got, m.MessageID)
		}
		if len(got) != len(tc.ids) || (len(got) > 0 && got[0] != tc.ids[0]) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.ids)
		}
	}
	if status, _ := f.do(t, "GET", "/v1/queues/q/find", f.keys["other"], nil); status != http.StatusForbidden {
		t.Errorf("a key over another queue: %d", status)
	}
}
