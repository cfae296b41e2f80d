package nats_test

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

// BenchmarkRelayJetStream drains b.N messages of 256 bytes, committed
// beforehand, from the store into an embedded JetStream server (file
// storage) with Concurrency 8, and reports the throughput and the process's
// CPU time per message (the server runs in the same process).
func BenchmarkRelayJetStream(b *testing.B) {
	srv := embedded(b, b.TempDir(), 0)
	js := connect(b, srv.ClientURL())
	stream(b, js, "EV")
	st := relaytest.Open(b, mqlite.QueueOptions{})
	relaytest.Send(b, st.Store, relaytest.Bodies(b.N, 256, false)...)
	b.ResetTimer()
	cpu := testdb.CPUTime()
	start := time.Now()
	obs := startRelay(b, st, relaynats.Config{JetStream: js, Subject: "EV.x"}, relay.Config{Concurrency: 8})
	obs.WaitFor(b, "every delivery", func(c relaytest.Counts) bool { return c.Completed == b.N })
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(testdb.CPUTime()-cpu)/float64(b.N), "cpu-ns/msg")
}

// BenchmarkRelayJetStreamR3 is BenchmarkRelayJetStream into the R3 stream
// of a three-node cluster in the same process (every message replicated to
// two more servers before its PubAck), for the throughput "Scale out by
// service" in docs/relay.md quotes beside the single server's.
func BenchmarkRelayJetStreamR3(b *testing.B) {
	c := newCluster(b)
	js := connectCluster(b, c, nil)
	clusterStream(b, c, js, "EV")
	st := relaytest.Open(b, mqlite.QueueOptions{})
	relaytest.Send(b, st.Store, relaytest.Bodies(b.N, 256, false)...)
	b.ResetTimer()
	cpu := testdb.CPUTime()
	start := time.Now()
	obs := startRelay(b, st, relaynats.Config{JetStream: js, Subject: "EV.x", AckTimeout: clusterAckTimeout}, relay.Config{Concurrency: 8})
	obs.WaitFor(b, "every delivery", func(c relaytest.Counts) bool { return c.Completed == b.N })
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(testdb.CPUTime()-cpu)/float64(b.N), "cpu-ns/msg")
}
