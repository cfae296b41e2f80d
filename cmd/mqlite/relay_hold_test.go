package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite/outbox"
)

// embeddedNATS starts a JetStream server in this process, on a free
// loopback port; the test's cleanup shuts it down.
func embeddedNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// natsWithStream starts an embedded JetStream server with the stream
// ORDERS on orders.> and returns its URL and the stream.
func natsWithStream(t *testing.T) (string, jetstream.Stream) {
	t.Helper()
	ns := embeddedNATS(t)
	nc, err := natsgo.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return ns.ClientURL(), s
}

// TestRelayTemplateHoldsAndStops walks docs/relay.md's NATS example with
// the README's sends (messages without a subject): with a subject template
// that renders "orders." for them, the relay holds them (said once,
// counted as holds of reason "template", not one dead letter), and Ctrl-C
// stops it at once, saying so, though --drain is an hour; the template the
// docs give now delivers them.
func TestRelayTemplateHoldsAndStops(t *testing.T) {
	t.Parallel()
	natsURL, stream := natsWithStream(t)
	path := filepath.Join(t.TempDir(), "app.db")
	events, err := os.ReadFile("../../examples/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"queues", "create", "events", "--max-delivery", "10000"},
		{"send", "events", "--file", "-"},
	} {
		if _, errOut, code := runIn(t, string(events), false, append(args, "--db", path, "--url", "")...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	relayArgs := func(subject string) []string {
		return []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "nats", "--nats-url", natsURL,
			"--subject", subject, "--drain", "1h", "--metrics-addr", "127.0.0.1:0"}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, relayArgs("orders.{{.Subject}}"), strings.NewReader(""), &stdout, &stderr) }()
	stderr.waitFor(t, "the route template renders no valid destination")
	scrapeUntil(t, &stderr, done, `mqlite_relay_holds_total{queue="events",reason="template",sink="nats"}`)
	cancel() // as SIGINT would
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d; stderr %s", code, stderr.String())
		}
	case <-time.After(time.Minute): // --drain 1h: only a stop that ends the hold returns
		t.Fatalf("the relay did not stop on cancel; stderr %s", stderr.String())
	}
	logged := stderr.String()
	if n := strings.Count(logged, `level=ERROR msg="relay: the route template renders no valid destination`); n != 1 {
		t.Errorf("the template's fault was said %d times, want once:\n%s", n, logged)
	}
	if !strings.Contains(logged, `the --subject template \"orders.{{.Subject}}\" renders no valid destination`) {
		t.Errorf("stderr does not name the flag to fix:\n%s", logged)
	}
	if !strings.Contains(logged, "relay: stopping") || strings.Contains(logged, "relay: dead-lettered") {
		t.Errorf("stderr does not say it stops, or says it dead-lettered:\n%s", logged)
	}
	out, errOut, code := runIn(t, "", false, "stats", "events", "--db", path, "--url", "", "--json")
	if code != 0 || !strings.Contains(out, `"dead_lettered": 0`) {
		t.Fatalf("stats: exit %d: %s %s", code, out, errOut)
	}

	// The template docs/relay.md gives renders every message.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	stderr = syncBuffer{}
	go func() {
		done <- run(ctx, relayArgs(`orders.{{or .Subject .Queue}}`), strings.NewReader(""), &stdout, &stderr)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d messages, want the 5 sent; stderr %s", info.State.Msgs, stderr.String())
		}
		select {
		case <-time.After(20 * time.Millisecond): // a poll of the stream
		case code := <-done:
			t.Fatalf("the relay exited %d; stderr %s", code, stderr.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
}

// TestRelayStopsOnSIGINT: the built command, holding messages for a
// missing stream, stops on SIGINT at once, though --drain is an hour, and
// says that it stops.
func TestRelayStopsOnSIGINT(t *testing.T) {
	t.Parallel()
	ns := embeddedNATS(t) // no stream: every message is held
	path := relayFile(t, outbox.Message{Body: []byte("held")})
	cmd := exec.Command(binary(t), "relay", "--db", path, "--queue", "events", "--sink", "nats",
		"--nats-url", ns.ClientURL(), "--drain", "1h")
	cmd.Env = append(os.Environ(), "MQLITE_URL=", "MQLITE_DB=", "MQLITE_KEY=")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stderr.waitFor(t, "holding them")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay after SIGINT: %v; stderr %s", err, stderr.String())
		}
	case <-time.After(time.Minute): // --drain 1h: only a stop that ends the hold returns
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the relay did not stop on SIGINT; stderr %s", stderr.String())
	}
	if s := stderr.String(); !strings.Contains(s, "relay: stopping") || !strings.Contains(s, "relay: stopped") {
		t.Fatalf("stderr does not say it stops: %s", s)
	}
}
