//go:build crash_injection

package nats_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

// The relay crash test against the cluster: a relay process (this test
// binary, re-executed as TestClusterRelayCrashWorker) forwards a queue
// into the R3 stream of a three-node cluster in the harness, which
// SIGKILLs it mid-stream three times and starts it again on the same file.
// The messages a killed relay had published but not completed go out again
// with the same Nats-Msg-Id once recovery frees them, and the stream drops
// the copies: it ends with every message exactly once.

const (
	envClusterWorker = "MQLITE_CLUSTER_CRASH_DB" // the store's path; set only in the worker
	envClusterURLs   = "MQLITE_CLUSTER_CRASH_URLS"
	clusterKills     = 3
)

func openClusterCrashStore(path string) (*mqlite.Store, error) {
	return mqlite.Open(context.Background(), path, mqlite.Config{ReaperInterval: 50 * time.Millisecond})
}

// TestClusterRelayCrashWorker is the relay process; it does nothing unless
// the harness started it. It exits once the queue is empty.
func TestClusterRelayCrashWorker(t *testing.T) {
	path := os.Getenv(envClusterWorker)
	if path == "" {
		t.Skip("runs only as the cluster crash harness's worker process")
	}
	st, err := openClusterCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nc, err := natsgo.Connect(os.Getenv(envClusterURLs), natsgo.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(clusterAckTimeout))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := relaynats.New(relaynats.Config{JetStream: js, Subject: "EV.x", AckTimeout: clusterAckTimeout})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.RunUntilEmpty(t, st, sink, relay.Config{
		Concurrency: 8, HoldBackoff: relayHold,
		Backoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
}

func TestClusterRelayCrash(t *testing.T) {
	c := newCluster(t)
	js := connectCluster(t, c, nil)
	s := clusterStream(t, c, js, "EV")
	path := filepath.Join(t.TempDir(), "relay.db")
	st, err := openClusterCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	err = st.CreateQueue(context.Background(), relaytest.Queue, mqlite.QueueOptions{
		MaxDeliveryCount: mqlite.MaxDeliveryLimit, LockDuration: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Send(t, st, relaytest.Bodies(clusterN, 256, true)...)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		return relaytest.StartWorker(t, "TestClusterRelayCrashWorker", envClusterWorker+"="+path, envClusterURLs+"="+c.urls())
	}
	stored := func() int64 {
		info, err := s.Info(context.Background())
		if err != nil {
			return 0
		}
		return int64(info.State.Msgs)
	}
	for k := 1; k <= clusterKills; k++ {
		cmd := start()
		// A busy machine slows the worker down: only a stream that stopped
		// growing fails the test.
		relaytest.PollGrowth(t, "the stream to grow", stored, int64(k*clusterN/(clusterKills+1)))
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait() // killed: the error says so
	}
	last := start()
	if err := last.Wait(); err != nil { // exits by itself once the queue is empty
		t.Fatalf("last worker: %v", err)
	}
	st, err = openClusterCrashStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	relaytest.Empty(t, st)
	exactlyOnce(t, s, clusterN)
	t.Logf("%d messages, %d SIGKILLs of the relay: the R3 stream holds each once", clusterN, clusterKills)
}
