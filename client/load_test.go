package client_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestLoadLoopback is the bounded load test: producers and consumers, each
// on its own goroutine with its own client, over HTTP on loopback, a fixed
// count of messages. Every message must be completed; duplicates (allowed
// by at-least-once) are counted and reported. MQLITE_LOAD_MESSAGES sets the
// count (default 1,000, sized for -race on 2 cores).
func TestLoadLoopback(t *testing.T) {
	t.Parallel()
	total := 1000
	if v, err := strconv.Atoi(os.Getenv("MQLITE_LOAD_MESSAGES")); err == nil && v > 0 {
		total = v
	}
	const producers, consumers, batch = 4, 4, 50
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "load", mqlite.QueueOptions{LockDuration: time.Minute})
	url, key := serve(t, tb, broker.Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	per := total / producers
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t, url, key, tb.Clock)
			for i := 0; i < per; i += batch {
				msgs := make([]outbox.Message, 0, batch)
				for j := i; j < min(i+batch, per); j++ {
					id := fmt.Sprintf("p%d-%d", p, j)
					msgs = append(msgs, outbox.Message{Body: []byte(id), MessageID: id})
				}
				if _, err := c.SendBatch(ctx, "load", msgs); err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	seen := make(map[string]int, total)
	var distinct atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t, url, key, tb.Clock)
			for {
				select {
				case <-done:
					return
				default:
				}
				msgs, err := c.Receive(ctx, "load", mqlite.ReceiveOptions{Max: 32, Wait: 200 * time.Millisecond})
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				locks := make([]mqlite.Lock, len(msgs))
				for i, m := range msgs {
					locks[i] = m.Lock()
				}
				errs, err := c.CompleteBatch(ctx, locks)
				if err != nil {
					t.Errorf("complete: %v", err)
					return
				}
				mu.Lock()
				for i, m := range msgs {
					if errs[i] != nil {
						continue // lost lease: it comes again
					}
					seen[string(m.Body)]++
					if seen[string(m.Body)] == 1 && distinct.Add(1) == int64(producers*per) {
						once.Do(func() { close(done) })
					}
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		return
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) != producers*per {
		t.Fatalf("completed %d distinct messages, want %d", len(seen), producers*per)
	}
	left, err := tb.Store.Stats(ctx, "load")
	if err != nil {
		t.Fatal(err)
	}
	if left.Total() != 0 {
		t.Fatalf("left in the queue: %+v", left)
	}
	t.Logf("%d messages, %d producers, %d consumers: all completed in %v (%.0f msgs/s), %d duplicates",
		producers*per, producers, consumers, took, float64(producers*per)/took.Seconds(), dups)
}
