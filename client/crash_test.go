//go:build crash_injection

package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/outbox"
)

// TestBrokerCrash SIGKILLs a broker process mid-load, several times, and
// restarts it on the same address: producers and consumers ride through
// with the client's retries, and every send the broker acknowledged is
// completed in the end (nothing acknowledged is lost). Duplicates, allowed
// by at-least-once, are counted and reported.
func TestBrokerCrash(t *testing.T) {
	const producers, consumers, perProducer, kills = 2, 2, 1500, 5
	path := filepath.Join(t.TempDir(), "crash.db")
	key := prepareFile(t, path, "crash")
	p := startBroker(t, path, "")
	addr := strings.TrimPrefix(p.url, "http://")
	var pmu sync.Mutex // guards p across restarts
	defer func() { pmu.Lock(); p.stop(t); pmu.Unlock() }()

	newC := func() *client.Client {
		c, err := client.New(client.Config{URL: "http://" + addr, Key: key, MaxElapsed: time.Minute, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var mu sync.Mutex
	acked := map[string]bool{}
	completed := map[string]int{}
	redelivered := 0 // deliveries after the first: what the kills cost
	allAcked := make(chan struct{})
	var wg, pwg sync.WaitGroup
	for w := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			c := newC()
			defer c.Close()
			for i := 0; i < perProducer; i += 10 {
				msgs := make([]outbox.Message, 10)
				for j := range msgs {
					id := fmt.Sprintf("p%d-%d", w, i+j)
					msgs[j] = outbox.Message{Body: []byte(id), MessageID: id}
				}
				res, err := c.SendBatch(ctx, "crash", msgs)
				if err != nil {
					t.Errorf("producer %d: %v", w, err)
					return
				}
				mu.Lock()
				for j, r := range res {
					if r.Err == nil {
						acked[msgs[j].MessageID] = true
					}
				}
				mu.Unlock()
			}
		}()
	}
	go func() { pwg.Wait(); close(allAcked) }()

	done := make(chan struct{})
	progress := make(chan struct{}, 1) // a consumer completed a batch
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newC()
			defer c.Close()
			for {
				select {
				case <-done:
					return
				default:
				}
				msgs, err := c.Receive(ctx, "crash", mqlite.ReceiveOptions{Max: 20, Wait: 200 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("receive: %v", err)
					}
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
					if ctx.Err() == nil {
						t.Errorf("complete: %v", err)
					}
					return
				}
				mu.Lock()
				for i, m := range msgs {
					if errs[i] == nil {
						completed[string(m.Body)]++
					}
					if m.DeliveryCount > 1 {
						redelivered++
					}
				}
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}

	// The killer: SIGKILL at random moments under load, restart at once.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for k := range kills {
		select {
		case <-time.After(time.Duration(200+rng.IntN(600)) * time.Millisecond):
		case <-allAcked:
		}
		pmu.Lock()
		p.kill()
		p = startBroker(t, path, addr)
		pmu.Unlock()
		t.Logf("kill %d done", k+1)
	}
	<-allAcked

	// Every acknowledged send must be completed.
	deadline := time.After(90 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for id := range acked {
			if completed[id] == 0 {
				missing++
			}
		}
		n := len(acked)
		mu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case <-deadline:
			close(done)
			wg.Wait()
			t.Fatalf("%d of %d acknowledged messages never completed", missing, n)
		case <-progress:
		}
	}
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, c := range completed {
		dups += c - 1
	}
	if len(acked) != producers*perProducer {
		t.Errorf("%d sends acknowledged, want %d (the producers' retries should ride through)", len(acked), producers*perProducer)
	}
	t.Logf("%d kills; %d acknowledged sends all completed; %d duplicate completions, %d redeliveries", kills, len(acked), dups, redelivered)
}
