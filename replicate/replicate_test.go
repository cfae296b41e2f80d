package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/superfly/ltx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/replicate"
)

var quiet = slog.New(slog.DiscardHandler)

// open opens a store on a fresh file with queue "q".
func open(t *testing.T) *mqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "app.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	return st
}

func send(t *testing.T, st *mqlite.Store, body string) {
	t.Helper()
	_, err := outbox.Send(context.Background(), st, "q", outbox.Message{Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
}

// restored restores the replica in dir into a new file and returns the
// bodies of its queue q.
func restored(t *testing.T, dir string) []string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "restored.db")
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = path
	if err := litestream.NewReplicaWithClient(nil, file.NewReplicaClient(dir)).Restore(ctx, opt); err != nil {
		t.Fatal(err)
	}
	return queueBodies(t, path)
}

// queueBodies opens the file at path and returns the bodies of its queue q.
func queueBodies(t *testing.T, path string) []string {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs, err := st.Peek(ctx, "q", mqlite.PeekParams{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, string(m.Body))
	}
	return bodies
}

// TestWaitReplicatedShips: with the background shipments an hour apart,
// what WaitReplicated (and Tx) returned for is on the replica, and what
// was only committed after is not.
func TestWaitReplicatedShips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	dir := t.TempDir()
	rep, err := replicate.Start(ctx, st, replicate.Config{Client: file.NewReplicaClient(dir), SyncInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	send(t, st, "a")
	if err := rep.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	err = rep.Tx(ctx, st, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("b")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(restored(t, dir)); got != "[a b]" {
		t.Fatalf("replica holds %s, want [a b]", got)
	}
	send(t, st, "c") // committed, not shipped: the background shipment is an hour away
	if got := fmt.Sprint(restored(t, dir)); got != "[a b]" {
		t.Fatalf("replica holds %s before a shipment, want [a b]", got)
	}
	if s := rep.Stats(); s.Shipments < 2 || s.Failures != 0 || s.LastOK.IsZero() {
		t.Fatalf("stats %+v", s)
	}
	if err := rep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rep.WaitReplicated(ctx); !errors.Is(err, replicate.ErrClosed) {
		t.Fatalf("WaitReplicated after Close = %v, want ErrClosed", err)
	}
	if got := fmt.Sprint(restored(t, dir)); got != "[a b c]" {
		t.Fatalf("replica holds %s after Close's last shipment, want [a b c]", got)
	}
}

// flakyClient is a replica whose writes fail while down is set.
type flakyClient struct {
	litestream.ReplicaClient
	down atomic.Bool
}

var errReplicaDown = errors.New("test: replica unreachable")

func (c *flakyClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	if c.down.Load() {
		return nil, errReplicaDown
	}
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, r)
}

// TestReplicaDownWaits: while the replica cannot be written, a
// WaitReplicated keeps waiting (the failure is counted and logged, and the
// commit stays in the local file); once the replica is back, it returns.
func TestReplicaDownWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	dir := t.TempDir()
	client := &flakyClient{ReplicaClient: file.NewReplicaClient(dir)}
	logs := &errorLog{}
	rep, err := replicate.Start(ctx, st, replicate.Config{Client: client, SyncInterval: time.Hour, Retry: 10 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close(ctx)
	client.down.Store(true)
	send(t, st, "a")
	done := make(chan error, 1)
	go func() { done <- rep.WaitReplicated(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for rep.Stats().Failures < 3 { // three failed shipments: the wait goes on
		if time.Now().After(deadline) {
			t.Fatal("no failed shipment")
		}
		select {
		case err := <-done:
			t.Fatalf("WaitReplicated returned %v while the replica was down", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if s := rep.Stats(); !errors.Is(s.LastErr, errReplicaDown) {
		t.Fatalf("stats %+v, want the replica's error", s)
	}
	col := replicate.NewCollector(rep)
	if got := testutil.ToFloat64(gauge(col, replicate.MetricFailing)); got != 1 {
		t.Fatalf("%s = %v while the replica is down, want 1", replicate.MetricFailing, got)
	}
	if logs.count() != 1 {
		t.Fatalf("%d error logs, want one for the streak", logs.count())
	}
	client.down.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(gauge(col, replicate.MetricFailing)); got != 0 {
		t.Fatalf("%s = %v once the replica is back, want 0", replicate.MetricFailing, got)
	}
	if n, err := testutil.GatherAndCount(registry(col), replicate.MetricFailures); err != nil || n != 1 {
		t.Fatalf("%s: %d series, %v", replicate.MetricFailures, n, err)
	}
	if got := fmt.Sprint(restored(t, dir)); got != "[a]" {
		t.Fatalf("replica holds %s, want [a]", got)
	}
}

// gauge returns the one metric named name that col collects.
func gauge(col prometheus.Collector, name string) prometheus.Collector {
	return &oneMetric{col, name}
}

type oneMetric struct {
	prometheus.Collector
	name string
}

func (o *oneMetric) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 8)
	o.Collector.Collect(all)
	close(all)
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+o.name+`"`) {
			ch <- m
		}
	}
}

func registry(col prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(col)
	return r
}

// errorLog counts the records at ERROR of replicate's own logger (not
// Litestream's, which carry a "litestream" attribute).
type errorLog struct {
	mu sync.Mutex
	n  int
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "replicate:") {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }
func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	st := open(t)
	for name, cfg := range map[string]replicate.Config{
		"no client":         {},
		"negative interval": {Client: file.NewReplicaClient(t.TempDir()), SyncInterval: -1},
	} {
		if _, err := replicate.Start(context.Background(), st, cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, replicate.ErrInvalidConfig) {
			t.Errorf("%s: Start = %v, want ErrInvalidConfig", name, err)
		}
	}
}
