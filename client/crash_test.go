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
	"github.com/mqlite/mqlite/internal/loadtest"
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

	ledger := loadtest.New()
	allAcked := make(chan struct{})
	var wg, pwg sync.WaitGroup
	for w := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			c := newC()
			defer c.Close()
			if err := ledger.Produce(ctx, c, "crash", fmt.Sprintf("p%d", w), perProducer, 10); err != nil {
				t.Error(err)
			}
		}()
	}
	go func() { pwg.Wait(); close(allAcked) }()

	done := make(chan struct{})
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newC()
			defer c.Close()
			err := ledger.Consume(ctx, c, "crash", mqlite.ReceiveOptions{Max: 20, Wait: 200 * time.Millisecond}, done)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
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
	missing := ledger.WaitCompleted(90 * time.Second)
	close(done)
	wg.Wait()
	c := ledger.Counts()
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged messages never completed", missing, c.Acked)
	}
	if c.Acked != producers*perProducer {
		t.Errorf("%d sends acknowledged, want %d (the producers' retries should ride through)", c.Acked, producers*perProducer)
	}
	t.Logf("%d kills; %d acknowledged sends all completed; %d duplicate completions, %d redeliveries", kills, c.Acked, c.Duplicates, c.Redelivered)
}
