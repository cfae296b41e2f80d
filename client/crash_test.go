//go:build crash_injection

package client_test

import (
	"context"
	"fmt"
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
// by at-least-once, are counted and reported. The kills land under load
// every run: kill k waits for k/(kills+1) of the sends to be acknowledged,
// while the producers still send (where in a request it lands is chance). A
// lost message fails the test as soon as the queue holds nothing more to
// deliver, not at the wait's timeout.
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

	// The killer: SIGKILL under load, at moments spread over the sends,
	// restart at once.
	underLoad := 0
	for k := range kills {
		if err := ledger.WaitAcked(ctx, (k+1)*producers*perProducer/(kills+1)); err != nil {
			t.Fatalf("kill %d: %v", k+1, err)
		}
		at := ledger.Counts().Acked
		select {
		case <-allAcked:
		default:
			underLoad++
		}
		pmu.Lock()
		p.kill()
		p = startBroker(t, path, addr)
		pmu.Unlock()
		t.Logf("kill %d done, %d sends acknowledged before it", k+1, at)
	}
	<-allAcked
	if underLoad != kills {
		t.Errorf("%d of %d kills landed while the producers sent, want all", underLoad, kills)
	}

	// Every acknowledged send must be completed.
	sc := newC()
	defer sc.Close()
	ledger.WaitCompletedOrEmpty(90*time.Second, func() (int64, error) {
		s, err := sc.Stats(ctx, "crash")
		return s.Active + s.Scheduled + s.Locked + s.Deferred, err
	})
	close(done)
	wg.Wait()
	c := ledger.Counts()
	if c.Missing > 0 {
		s, _ := sc.Stats(ctx, "crash")
		t.Fatalf("%d of %d acknowledged messages never completed (the queue: %d active, %d locked, %d dead letters)",
			c.Missing, c.Acked, s.Active, s.Locked, s.DeadLettered)
	}
	if c.Acked != producers*perProducer {
		t.Errorf("%d sends acknowledged, want %d (the producers' retries should ride through)", c.Acked, producers*perProducer)
	}
	t.Logf("%d kills, all under load; %d acknowledged sends all completed; %d duplicate completions, %d redeliveries", kills, c.Acked, c.Duplicates, c.Redelivered)
}
