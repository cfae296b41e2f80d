package broker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// metricsBroker serves a fresh store with cfg and returns it, its URL and
// an admin key over every queue.
func metricsBroker(t *testing.T, cfg broker.Config) (*testdb.Bundle, string, string) {
	t.Helper()
	tb := testdb.Open(t, mqlite.Options{})
	_, key, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = tb.Store, quiet()
	srv, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Error(err)
		}
		ts.Close()
	})
	return tb, ts.URL, key
}

// scrape GETs /metrics with key ("" for none) and parses the text format.
func scrape(t *testing.T, url, key string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return resp.StatusCode, fams
}

// value returns the value of the sample of family name whose labels are
// labels, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsAfterAKnownWorkload runs testdb.MetricsWorkload through the
// broker (the client's sends, receives and settlements), scrapes /metrics
// and checks every counter and state of the queue exactly, and the
// counters of the stats endpoint with them.
func TestMetricsAfterAKnownWorkload(t *testing.T) {
	t.Parallel()
	tb, url, key := metricsBroker(t, broker.Config{})
	tb.Queue(t, "q", testdb.WorkloadQueue)
	tb.Queue(t, "idle", mqlite.QueueOptions{})
	c, err := client.New(client.Config{URL: url, Key: key, Clock: tb.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(body string) {
		if _, err := c.Send(ctx, "q", outbox.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	want := testdb.MetricsWorkload(t, c, "q", send, tb.Clock)

	status, fams := scrape(t, url, key)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	q := map[string]string{"queue": "q"}
	for _, tc := range []struct {
		name string
		want int64
	}{
		{"mqlite_queue_sent_total", want.Counters.Sent},
		{"mqlite_queue_received_total", want.Counters.Received},
		{"mqlite_queue_completed_total", want.Counters.Completed},
		{"mqlite_queue_abandoned_total", want.Counters.Abandoned},
		{"mqlite_queue_rejected_total", want.Counters.Rejected},
		{"mqlite_queue_dead_lettered_total", want.Counters.DeadLettered},
		{"mqlite_queue_lock_lost_total", want.Counters.LockLost},
		{"mqlite_queue_redelivered_total", want.Counters.Redelivered},
		{"mqlite_queue_dead_letters", want.DeadLettered},
		{"mqlite_claim_duration_seconds", 6},  // sample count: one per Receive
		{"mqlite_settle_duration_seconds", 7}, // one per settle call
	} {
		if got, ok := value(fams, tc.name, q); !ok || got != float64(tc.want) {
			t.Errorf("%s{queue=q} = %v (present %v), want %d", tc.name, got, ok, tc.want)
		}
	}
	for state, n := range map[string]int64{"active": want.Active, "dead_lettered": want.DeadLettered,
		"scheduled": 0, "locked": 0, "deferred": 0} {
		if got, ok := value(fams, "mqlite_queue_messages", map[string]string{"queue": "q", "state": state}); !ok || got != float64(n) {
			t.Errorf("mqlite_queue_messages{queue=q,state=%s} = %v (present %v), want %d", state, got, ok, n)
		}
	}
	if got, ok := value(fams, "mqlite_queue_sent_total", map[string]string{"queue": "idle"}); !ok || got != 0 {
		t.Errorf("idle queue: sent %v (present %v), want a 0", got, ok)
	}
	st, err := c.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Counters != want.Counters {
		t.Errorf("stats counters over the wire %+v, want %+v", st.Counters, want.Counters)
	}
}

// TestMetricsAccess: /metrics needs an admin key over every queue unless
// Config.PublicMetrics.
func TestMetricsAccess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		public bool
		role   keys.Role
		queues []string
		status int
	}{
		{"no key", false, "", nil, http.StatusUnauthorized},
		{"consumer key", false, keys.Consumer, []string{"*"}, http.StatusForbidden},
		{"admin of one queue", false, keys.Admin, []string{"q"}, http.StatusForbidden},
		{"admin of every queue", false, keys.Admin, []string{"*"}, http.StatusOK},
		{"public, no key", true, "", nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb, url, _ := metricsBroker(t, broker.Config{PublicMetrics: tc.public})
			key := ""
			if tc.role != "" {
				_, secret, err := keys.Create(ctx, tb.Store, keys.Scope{Role: tc.role, Queues: tc.queues})
				if err != nil {
					t.Fatal(err)
				}
				key = secret
			}
			if status, _ := scrape(t, url, key); status != tc.status {
				t.Fatalf("GET /metrics: %d, want %d", status, tc.status)
			}
		})
	}
}
