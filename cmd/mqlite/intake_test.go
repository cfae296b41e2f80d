package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
)

// intakeFile makes a store file with queue "inbox" of dedup window window,
// closed, and returns its path.
func intakeFile(t *testing.T, window time.Duration) string {
	t.Helper()
	ctx := context.Background()
	path := t.TempDir() + "/app.db"
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "inbox", mqlite.QueueOptions{DedupWindow: window}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRelayFromNATS: --from nats takes a stream's messages into the
// queue, each once by its id, and counts them in its metrics.
func TestRelayFromNATS(t *testing.T) {
	t.Parallel()
	url, _ := natsWithStream(t)
	path := intakeFile(t, 2*time.Hour)
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"order-1", "order-2"} {
		if _, err := js.Publish(context.Background(), "orders.created", []byte(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "--db", path, "--url", "", "--queue", "inbox", "--from", "nats",
			"--nats-url", url, "--stream", "ORDERS", "--metrics-addr", "127.0.0.1:0"}, strings.NewReader(""), &stdout, &stderr)
	}()
	scrapeUntil(t, &stderr, done, `mqlite_relay_intake_total{outcome="taken",queue="inbox",source="nats"} 2`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"peek", "--db", path, "--url", "", "inbox"}, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("peek: %d %s", code, out.String())
	}
	if !strings.Contains(out.String(), "order-2") {
		t.Fatalf("peek shows %s", out.String())
	}
}

// TestRelayFromRefusesAShortDedupWindow: a queue that forgets ids before
// the source can deliver again is refused, with the command that fixes it.
func TestRelayFromRefusesAShortDedupWindow(t *testing.T) {
	t.Parallel()
	url, _ := natsWithStream(t)
	path := intakeFile(t, 0) // the default, 10 minutes, under the default --outage of 1h
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"relay", "--db", path, "--url", "", "--queue", "inbox", "--from", "nats",
		"--nats-url", url, "--stream", "ORDERS"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "mqlite queues update inbox --dedup-window 1h1m0s") {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
}

func TestRelayFromUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"sink and from":     {"relay", "--db", "x.db", "--queue", "q", "--sink", "nats", "--from", "nats", "--stream", "S"},
		"unknown source":    {"relay", "--db", "x.db", "--queue", "q", "--from", "sqs"},
		"nats no stream":    {"relay", "--db", "x.db", "--queue", "q", "--from", "nats"},
		"amqp no queue":     {"relay", "--db", "x.db", "--queue", "q", "--from", "amqp", "--amqp-url", "amqp://127.0.0.1/"},
		"kafka no topic":    {"relay", "--db", "x.db", "--queue", "q", "--from", "kafka", "--kafka-brokers", "127.0.0.1:9092"},
		"from over a --url": {"relay", "--db", "", "--url", "http://127.0.0.1:1", "--queue", "q", "--from", "nats", "--stream", "S"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit code %d, want 2; stderr %s", name, code, stderr.String())
		}
	}
}
