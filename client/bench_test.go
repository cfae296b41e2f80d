package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkBroker measures the broker as its own process on loopback, with
// 256-byte bodies (docs/benchmark.md, "Broker"):
//
//   - send-batch: 4 producers, 100 messages per request;
//   - receive-complete: 4 consumers, receive up to 100 then complete-batch;
//   - send-rtt: one message per request, one at a time: p50 and p99;
//
// and the broker's resident memory idle and at its peak under the load.
// b.N is the message count of the batched phases (make bench: 50000x).
func BenchmarkBroker(b *testing.B) {
	const body, batch, workers = 256, 100, 4
	path := filepath.Join(b.TempDir(), "bench.db")
	key := prepareFile(b, path, "bench", "rtt")
	p := startBroker(b, path, "")
	defer p.stop(b)
	ctx := context.Background()
	newC := func() *client.Client {
		c, err := client.New(client.Config{URL: p.url, Key: key})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	idle := p.rss()
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				if r := p.rss(); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	defer func() { close(stopSampling); <-sampled }()

	n := max(b.N, batch*workers)
	payload := make([]byte, body)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	b.ResetTimer()

	// Batched send.
	start, cpu0 := time.Now(), p.cpu()
	var wg sync.WaitGroup
	per := n / workers
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newC()
			defer c.Close()
			msgs := make([]outbox.Message, batch)
			for i := 0; i < per; i += batch {
				for j := range msgs {
					msgs[j] = outbox.Message{Body: payload, MessageID: fmt.Sprintf("w%d-%d", w, i+j)}
				}
				if _, err := c.SendBatch(ctx, "bench", msgs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	sendTook, sendCPU := time.Since(start), p.cpu()-cpu0
	total := per * workers

	// Batched receive + complete.
	start, cpu0 = time.Now(), p.cpu()
	var got atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newC()
			defer c.Close()
			for got.Load() < int64(total) {
				msgs, err := c.Receive(ctx, "bench", mqlite.ReceiveOptions{Max: batch, Wait: 100 * time.Millisecond})
				if err != nil {
					b.Error(err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				locks := make([]mqlite.Lock, len(msgs))
				for i, m := range msgs {
					locks[i] = m.Lock()
				}
				if _, err := c.CompleteBatch(ctx, locks); err != nil {
					b.Error(err)
					return
				}
				got.Add(int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	recvTook, recvCPU := time.Since(start), p.cpu()-cpu0
	b.StopTimer()

	// Single-send round trips.
	c := newC()
	defer c.Close()
	const rtts = 1000
	lat := make([]time.Duration, rtts)
	for i := range lat {
		t0 := time.Now()
		if _, err := c.Send(ctx, "rtt", outbox.Message{Body: payload, MessageID: fmt.Sprint("r", i)}); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)

	b.ReportMetric(float64(total)/sendTook.Seconds(), "send-msgs/s")
	b.ReportMetric(float64(total)/recvTook.Seconds(), "recv+complete-msgs/s")
	// The broker's CPU time per message: what a core of its own would give,
	// whatever else the machine runs meanwhile.
	b.ReportMetric(float64(sendCPU.Microseconds())/float64(total), "send-broker-cpu-µs/msg")
	b.ReportMetric(float64(recvCPU.Microseconds())/float64(total), "recv+complete-broker-cpu-µs/msg")
	b.ReportMetric(float64(lat[rtts/2].Microseconds()), "rtt-p50-µs")
	b.ReportMetric(float64(lat[rtts*99/100].Microseconds()), "rtt-p99-µs")
	b.ReportMetric(float64(idle)/(1<<20), "rss-idle-MiB")
	b.ReportMetric(float64(peak.Load())/(1<<20), "rss-peak-MiB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBrokerPeekRSS measures the broker's memory for answers that
// carry large bodies (docs/benchmark.md, "Broker memory
// under large answers"): 200 messages of the largest size a default store
// allows (1 MiB, body and metadata), then 4 concurrent peeks of up to 1,000
// messages each, against a broker process with no byte budget
// (MaxResponseBytes -1: Max alone bounds an answer, as before the byte budget)
// and with the default one (4 MiB). It reports the broker's resident
// memory before the peeks and its high-water mark (VmHWM) after them.
func BenchmarkBrokerPeekRSS(b *testing.B) {
	const msgs, peeks = 200, 4
	path := filepath.Join(b.TempDir(), "large.db")
	key := prepareFile(b, path, "large")
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, mqlite.DefaultMaxMessageBytes)
	for i := 0; i < msgs; i += 10 {
		err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			for j := range 10 {
				body[0], body[1] = byte(i), byte(j) // distinct content keys
				if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "large", outbox.Message{Body: body}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		budget int64
	}{{"budget=off", -1}, {"budget=default", broker.DefaultMaxResponseBytes}} {
		b.Run(c.name, func(b *testing.B) {
			// Without a budget, 4 answers of 270 MiB of JSON each take
			// minutes on a busy machine: past the default write timeout.
			p := startBroker(b, path, "", fmt.Sprintf("%s=%d", envBrokerBudget, c.budget), envBrokerWrite+"=10m")
			defer p.stop(b)
			cl, err := client.New(client.Config{URL: p.url, Key: key, Timeout: 5 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			idle := p.rss()
			var got atomic.Int64
			for range b.N {
				var wg sync.WaitGroup
				for range peeks {
					wg.Go(func() {
						m, err := cl.Peek(context.Background(), "large", mqlite.PeekParams{Max: 1000})
						if err != nil {
							b.Error(err)
						}
						got.Store(int64(len(m)))
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(got.Load()), "msgs/peek")
			b.ReportMetric(float64(idle)/(1<<20), "rss-before-MiB")
			b.ReportMetric(float64(p.peakRSS())/(1<<20), "rss-peak-MiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}
