package broker_test

import (
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestDashboardShowsNoCompletedMessage: the routes the dashboard lists
// messages and counts from (peek, find in every state and by MessageID,
// dead letters, stats, counts) show none of the messages a consumer
// completed, which the store keeps as the receipts of their completions,
// beside the one message left.
func TestDashboardShowsNoCompletedMessage(t *testing.T) {
	f := start(t, broker.Config{})
	st := f.tb.Store
	res, err := outbox.Send(ctx, st, "q", outbox.Message{Body: []byte("done"), MessageID: "done"},
		outbox.Message{Body: []byte("left")})
	if err != nil {
		t.Fatal(err)
	}
	done := res[0].Seq
	ms, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(ms) != 1 || ms[0].Seq != done {
		t.Fatalf("receive: %+v, %v", ms, err)
	}
	if err := st.Complete(ctx, ms[0].Lock()); err != nil {
		t.Fatal(err)
	}
	key := f.keys["admin"]
	for _, path := range []string{
		"/v1/queues/q/messages",
		"/v1/queues/q/find",
		"/v1/queues/q/find?message_id=done",
		"/v1/queues/q/find?state=active",
		"/v1/queues/q/dead-letters",
	} {
		var out wire.FindResponse
		if code := f.get(t, path, key, &out); code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, m := range out.Messages {
			if m.Seq == done {
				t.Errorf("GET %s shows the completed message %d", path, done)
			}
		}
	}
	var stats wire.Stats
	if code := f.get(t, "/v1/queues/q/stats", key, &stats); code != 200 || stats.Active != 1 ||
		stats.Scheduled+stats.Locked+stats.Deferred+stats.DeadLettered != 0 {
		t.Errorf("stats: %d %+v, want the one message left", code, stats)
	}
	var counts wire.CountsResponse
	if code := f.get(t, "/v1/counts", key, &counts); code != 200 {
		t.Fatalf("counts: %d", code)
	}
	for _, c := range counts.Queues {
		if c.Queue == "q" && c.Active+c.Scheduled+c.Locked+c.Deferred+c.DeadLettered != 1 {
			t.Errorf("counts of q: %+v, want the one message left", c)
		}
	}
}
