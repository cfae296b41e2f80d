package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	"github.com/mqlite/mqlite/relay/webhook"
)

// BenchmarkRelayWebhook drains b.N messages of 256 bytes, committed
// beforehand, into a local webhook receiver (an httptest server in the same
// process that reads each body and answers 200), signed with one secret,
// with Concurrency 8 and the sink's default 16 requests at once.
func BenchmarkRelayWebhook(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: secrets[:1]})
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	st := relaytest.Open(b, mqlite.QueueOptions{})
	relaytest.Send(b, st.Store, relaytest.Bodies(b.N, 256, false)...)
	b.ResetTimer()
	cpu := testdb.CPUTime()
	start := time.Now()
	obs := relaytest.Relay(b, st.Store, sink, relay.Config{Concurrency: 8})
	obs.WaitFor(b, "every delivery", func(c relaytest.Counts) bool { return c.Completed == b.N })
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(testdb.CPUTime()-cpu)/float64(b.N), "cpu-ns/msg")
}
