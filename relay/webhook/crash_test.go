//go:build crash_injection

package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	"github.com/mqlite/mqlite/relay/webhook"
)

// The relay crash test: a relay process (this test binary, re-executed as
// TestRelayCrashWorker) forwards a queue to a webhook receiver in the
// harness, which SIGKILLs it mid-stream, several times, and starts it
// again on the same file. Every message must reach the receiver at least
// once; the messages a killed relay held come back when their lease ends
// and go out again with the same webhook-id. The last worker stops by
// itself once the queue is empty.

const (
	envRelayWorker = "MQLITE_RELAY_CRASH_DB" // the store's path; set only in the worker
	envRelayURL    = "MQLITE_RELAY_CRASH_URL"
	relayCrashN    = 2000
	relayKills     = 3
	relayLease     = 10 * time.Second // recovery on open frees a killed relay's leases at once
	crashWait      = 3 * time.Minute
)

func openCrashStore(path string) (*mqlite.Store, error) {
	return mqlite.Open(context.Background(), path, mqlite.Config{
		ReaperInterval: 50 * time.Millisecond, SchedulerInterval: 50 * time.Millisecond,
	})
}

// TestRelayCrashWorker is the relay process; it does nothing unless the
// harness started it. It exits once the queue is empty.
func TestRelayCrashWorker(t *testing.T) {
	path := os.Getenv(envRelayWorker)
	if path == "" {
		t.Skip("runs only as the relay crash harness's worker process")
	}
	st, err := openCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sink, err := webhook.New(webhook.Config{URL: os.Getenv(envRelayURL), Secrets: secrets[:1]})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	relaytest.RunUntilEmpty(t, st, sink, relay.Config{
		MaxBatch: 20,
		Backoff:  consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
}

func TestRelayCrashSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	st, err := openCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	err = st.CreateQueue(context.Background(), relaytest.Queue, mqlite.QueueOptions{
		MaxDeliveryCount: mqlite.MaxDeliveryLimit, LockDuration: relayLease,
	})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Send(t, st, relaytest.Bodies(relayCrashN, 64, true)...)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	posts := 0
	progress := make(chan int, 1) // the number of distinct ids, after each new one
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		posts++
		select { // replace the last count: the harness wants the newest
		case <-progress:
		default:
		}
		progress <- len(seen) // room: drained above, under mu
	}))
	defer srv.Close()

	start := func() *exec.Cmd {
		return relaytest.StartWorker(t, "TestRelayCrashWorker", envRelayWorker+"="+path, envRelayURL+"="+srv.URL)
	}
	waitDistinct := func(n int) {
		timeout := time.After(crashWait)
		for {
			select {
			case got := <-progress:
				if got >= n {
					return
				}
			case <-timeout:
				t.Fatalf("timed out waiting for %d distinct messages", n)
			}
		}
	}
	for k := 1; k <= relayKills; k++ {
		cmd := start()
		waitDistinct(k * relayCrashN / (relayKills + 1))
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait() // killed: the error says so
	}
	last := start()
	if err := last.Wait(); err != nil { // exits by itself once the queue is empty
		t.Fatalf("last worker: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	for i := range relayCrashN {
		if seen[fmt.Sprintf("msg-%d", i)] == 0 {
			t.Fatalf("message msg-%d never reached the receiver", i)
		}
	}
	st, err = openCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	relaytest.Empty(t, st)
	t.Logf("%d messages, %d SIGKILLs: %d POSTs, %d sent again after a kill (same webhook-id)",
		relayCrashN, relayKills, posts, posts-relayCrashN)
}
