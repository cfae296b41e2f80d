package broker_test

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/buildinfo"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// scrape GETs /metrics with key ("" for none) and parses the text format.
func scrape(t *testing.T, f *fixture, key string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	resp := f.send(t, "GET", "/metrics", key, nil)
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
	f := start(t, broker.Config{})
	tb, key := f.tb, f.keys["admin"]
	tb.Queue(t, "w", testdb.WorkloadQueue)
	c, err := client.New(client.Config{URL: f.url, Key: key, Clock: tb.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(body string) {
		if _, err := c.Send(ctx, "w", outbox.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	want := testdb.MetricsWorkload(t, c, "w", send, tb.Clock)

	status, fams := scrape(t, f, key)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	w := map[string]string{"queue": "w"}
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
		if got, ok := value(fams, tc.name, w); !ok || got != float64(tc.want) {
			t.Errorf("%s{queue=w} = %v (present %v), want %d", tc.name, got, ok, tc.want)
		}
	}
	for state, n := range map[string]int64{"active": want.Active, "dead_lettered": want.DeadLettered,
		"scheduled": 0, "locked": 0, "deferred": 0} {
		if got, ok := value(fams, "mqlite_queue_messages", map[string]string{"queue": "w", "state": state}); !ok || got != float64(n) {
			t.Errorf("mqlite_queue_messages{queue=w,state=%s} = %v (present %v), want %d", state, got, ok, n)
		}
	}
	if got, ok := value(fams, "mqlite_queue_sent_total", map[string]string{"queue": "q"}); !ok || got != 0 {
		t.Errorf("idle queue q: sent %v (present %v), want a 0", got, ok)
	}
	if got, ok := value(fams, "mqlite_build_info", map[string]string{"version": buildinfo.Version()}); !ok || got != 1 {
		t.Errorf("mqlite_build_info{version=%q} = %v (present %v), want 1", buildinfo.Version(), got, ok)
	}
	st, err := c.Stats(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if st.Counters != want.Counters {
		t.Errorf("stats counters over the wire %+v, want %+v", st.Counters, want.Counters)
	}
}

// TestPublicMetrics: Config.PublicMetrics serves /metrics without a key
// (TestEveryEndpointChecksTheKey covers the keys of the default).
func TestPublicMetrics(t *testing.T) {
	f := start(t, broker.Config{PublicMetrics: true})
	if status, fams := scrape(t, f, ""); status != http.StatusOK || fams["mqlite_queue_messages"] == nil {
		t.Fatalf("GET /metrics without a key: %d, %d families", status, len(fams))
	}
}
