package broker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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

// TestFindWithinTheByteBudget: a find's answer stops at the broker's byte
// budget and carries at least one message; a max_bytes above the budget is
// capped to it, a smaller one is kept. A consumer key's plain find (no
// state) shows live messages only: the dead letters need state
// dead_lettered, which needs an admin key, as the dead-letter listing.
func TestFindWithinTheByteBudget(t *testing.T) {
	const budget, size = 10_000, 4_000
	f := start(t, broker.Config{MaxResponseBytes: budget})
	var seqs []int64
	err := f.tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		for i := range 6 {
			seq, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: fmt.Appendf(nil, "%0*d", size, i)})
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{}) // seqs[0], dead-lettered
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	if err := f.tb.Store.Reject(ctx, got[0].Lock(), "r", ""); err != nil {
		t.Fatal(err)
	}
	find := func(query, key string) (int, []int64, int64) {
		var out wire.FindResponse
		status := f.call(t, "GET", "/v1/queues/q/find?"+query, f.keys[key], "", &out)
		var got []int64
		for _, m := range out.Messages {
			got = append(got, m.Seq)
		}
		return status, got, out.NextSeq
	}
	for _, tc := range []struct {
		name, query, key string
		status           int
		want             []int64
		next             int64
	}{
		{"the budget", "", "consumer", 200, seqs[1:3], seqs[2] + 1},
		{"above the budget: capped", "max_bytes=1000000", "consumer", 200, seqs[1:3], seqs[2] + 1},
		{"below the budget: kept", fmt.Sprintf("max_bytes=%d", size+10), "consumer", 200, seqs[1:2], seqs[1] + 1},
		{"always one", "max_bytes=1", "consumer", 200, seqs[1:2], seqs[1] + 1},
		{"live only from the dead letter on", fmt.Sprintf("from_seq=%d&max=1", seqs[0]), "consumer", 200, seqs[1:2], seqs[1] + 1},
		{"dead letters need an admin key", "state=dead_lettered", "consumer", 403, nil, 0},
		{"dead letters by an admin key", "state=dead_lettered", "admin", 200, seqs[:1], 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got, next := find(tc.query, tc.key)
			if status != tc.status || !slices.Equal(got, tc.want) || next != tc.next {
				t.Fatalf("%d %v next %d, want %d %v next %d", status, got, next, tc.status, tc.want, tc.next)
			}
		})
	}
}

// TestPeekRefusesWhatItDoesNotRead: the peek and the dead-letter listing
// take from_seq, max and max_bytes once each; any other parameter, or one
// given twice, is refused (400 malformed_request), never ignored.
func TestPeekRefusesWhatItDoesNotRead(t *testing.T) {
	f := start(t, broker.Config{})
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"from_seq=1&max=5&max_bytes=100", 200},
		{"state=dead_lettered", 400},
		{"max=1&max=2", 400},
		{"from_seq=x", 400},
	} {
		for _, path := range []string{"/v1/queues/q/messages?", "/v1/queues/q/dead-letters?"} {
			if status, _ := f.do(t, "GET", path+tc.query, f.keys["admin"], nil); status != tc.status {
				t.Errorf("%s%s: %d, want %d", path, tc.query, status, tc.status)
			}
		}
	}
}
