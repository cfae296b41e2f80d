package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
)

// syncBuffer is a bytes.Buffer safe for the relay's and the test's
// goroutines, that a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced by every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// waitFor blocks until the buffer holds sub, failing the test after a
// minute.
func (s *syncBuffer) waitFor(t *testing.T, sub string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), sub) {
			s.mu.Unlock()
			return
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no %q in %s", sub, s.String())
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// scrapeUntil reads the metrics URL the relay logged to stderr and scrapes
// it until it shows every line of want, failing the test after a minute or
// when the relay exits (done).
func scrapeUntil(t *testing.T, stderr *syncBuffer, done <-chan int, want ...string) {
	t.Helper()
	stderr.waitFor(t, "/metrics\n")
	logged := stderr.String()
	url := logged[strings.Index(logged, "url=http://")+len("url="):]
	url = url[:strings.Index(url, "\n")]
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var scraped bytes.Buffer
		_, _ = scraped.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		missing := false
		for _, w := range want {
			missing = missing || !strings.Contains(scraped.String(), w)
		}
		if !missing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %v:\n%s", want, scraped.String())
		}
		select {
		case <-time.After(20 * time.Millisecond): // a poll of the condition
		case <-done:
			t.Fatalf("the relay exited; stderr %s", stderr.String())
		}
	}
}

// relayFile makes a store file with queue "events" holding msgs, closed
// (the relay command opens the file itself), and returns its path.
func relayFile(t *testing.T, msgs ...outbox.Message) string {
	t.Helper()
	ctx := context.Background()
	path := t.TempDir() + "/app.db"
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A max-delivery fit for a relay: the default would be refused.
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{MaxDeliveryCount: 10_000}); err != nil {
		t.Fatal(err)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, m := range msgs {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "events", m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRelayCommandForwardsAndLogsDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := relayFile(t, outbox.Message{Body: []byte("one")}, outbox.Message{Body: []byte("two")}, outbox.Message{Body: []byte("refused")})

	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		if b.String() == "refused" {
			http.Error(w, "no such order", http.StatusUnprocessableEntity)
		}
		got <- b.String()
	}))
	defer srv.Close()

	rctx, cancel := context.WithCancel(ctx)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "webhook",
			"--webhook-url", srv.URL, "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--metrics-addr", "127.0.0.1:0"},
			strings.NewReader(""), &stdout, &stderr)
	}()
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case b := <-got:
			seen[b] = true
		case <-time.After(time.Minute):
			t.Fatalf("timed out; got %v; stderr %s", seen, stderr.String())
		}
	}
	// The dead letter is logged once Reject has committed.
	stderr.waitFor(t, "relay: dead-lettered")
	// --metrics-addr serves the relay observer's counts. The observer
	// counts a message once its settlement committed, which may come after
	// the webhook saw it.
	scrapeUntil(t, &stderr, done,
		`mqlite_relay_outcomes_total{outcome="delivered",queue="events",sink="webhook"} 2`,
		`mqlite_relay_outcomes_total{outcome="dead_lettered",queue="events",sink="webhook"} 1`)
	cancel() // as SIGINT would
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
	if s := stderr.String(); !strings.Contains(s, "HTTP 422") || !strings.Contains(s, "relay: stopped") {
		t.Fatalf("stderr %s", s)
	}
}

// TestRelayCommandKafka: --sink kafka produces the queue's messages to the
// topic (a kfake broker), each with its Mqlite-Id.
func TestRelayCommandKafka(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := relayFile(t, outbox.Message{Body: []byte("one"), MessageID: "order-1"})
	rctx, cancel := context.WithCancel(ctx)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "kafka",
			"--kafka-brokers", strings.Join(c.ListenAddrs(), ","), "--topic", "orders"}, strings.NewReader(""), &stdout, &stderr)
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(ctx, time.Minute)
	defer pcancel()
	var recs []*kgo.Record
	for len(recs) == 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("no record; stderr %s", stderr.String())
		}
		recs = append(recs, fs.Records()...)
	}
	if r := recs[0]; string(r.Value) != "one" || len(r.Headers) == 0 || r.Headers[0].Key != relaykafka.HeaderID || string(r.Headers[0].Value) != "order-1" {
		t.Fatalf("record %+v", r)
	}
	cancel() // as SIGINT would
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
}

func TestRelayCommandUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no db":            {"relay", "--db", "", "--url", "", "--queue", "q", "--sink", "nats"},
		"no queue":         {"relay", "--db", "x.db", "--sink", "nats"},
		"unknown sink":     {"relay", "--db", "x.db", "--queue", "q", "--sink", "sqs"},
		"kafka no brokers": {"relay", "--db", "x.db", "--queue", "q", "--sink", "kafka"},
		"webhook no url":   {"relay", "--db", "x.db", "--queue", "q", "--sink", "webhook", "--secret", "whsec_x"},
		"amqp no url":      {"relay", "--db", "x.db", "--queue", "q", "--sink", "amqp"},
		"single dash":      {"relay", "-db", "x.db", "--queue", "q", "--sink", "nats"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit code %d, want 2; stderr %s", name, code, stderr.String())
		}
	}
}

// TestRelayRefusesAShortMaxDelivery: a queue whose max-delivery the relay
// would spend within the outage it must outlast is refused, with the
// command that raises it.
func TestRelayRefusesAShortMaxDelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		maxDelivery int
		outage      time.Duration
		want        string // in the error; "" for none
	}{
		{mqlite.DefaultMaxDeliveryCount, time.Hour, "dead-letters a message after 10 deliveries, which the relay's retries spend in 8m31s"},
		{mqlite.DefaultMaxDeliveryCount, time.Hour, "mqlite queues update events --max-delivery 21 (outlasts 1h0m0s)"},
		{mqlite.DefaultMaxDeliveryCount, 8 * time.Minute, ""},
		{mqlite.DefaultMaxDeliveryCount, 0, ""},
		{20, time.Hour, "--max-delivery 21"},
		{21, time.Hour, ""},
		{10_000, 24 * time.Hour, ""},
	}
	for _, tc := range tests {
		err := checkOutage("events", tc.maxDelivery, tc.outage)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("max %d, outage %v: %v, want no error", tc.maxDelivery, tc.outage, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("max %d, outage %v: %v, want %q", tc.maxDelivery, tc.outage, err, tc.want)
		}
	}

	// The command refuses before it connects anywhere.
	path := t.TempDir() + "/app.db"
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"queues", "create", "events", "--db", path}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatal(stderr.String())
	}
	code := run(context.Background(), []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "nats",
		"--nats-url", "nats://127.0.0.1:1"}, strings.NewReader(""), &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--max-delivery 21") {
		t.Errorf("exit %d, stderr %s", code, stderr.String())
	}
}

// TestRelayNoStreamSaysWhatToCreate: JetStream without a stream for the
// subject makes the relay say, on the first failure, which stream to
// create; once one exists the message goes through.
func TestRelayNoStreamSaysWhatToCreate(t *testing.T) {
	t.Parallel()
	ns := embeddedNATS(t)
	path := t.TempDir() + "/app.db"
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{"queues", "create", "events", "--max-delivery", "10000"},
		{"send", "events", "hello"},
	} {
		if code := run(context.Background(), append(args, "--db", path), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatal(errOut.String())
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "nats",
			"--nats-url", ns.ClientURL(), "--subject", "orders.{{.Queue}}"}, strings.NewReader(""), &stdout, &stderr)
	}()
	stderr.waitFor(t, `create a stream covering it (nats stream add EVENTS --subjects \"orders.>\"`)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
	if n := strings.Count(stderr.String(), "create a stream"); n != 1 {
		t.Errorf("the hint came %d times, want once:\n%s", n, stderr.String())
	}
}

// TestSubjectsHint: the stream the hint suggests covers every subject the
// template renders, not only the first message's.
func TestSubjectsHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, subject, want string }{
		{"orders.{{.Queue}}", "orders.events", "orders.>"},
		{"app.orders.{{.Subject}}.v1", "app.orders.paid.v1", "app.orders.>"},
		{"orders.created", "orders.created", "orders.created"},
		{"{{.Subject}}", "paid.eu", "paid.>"},
		{"{{.Subject}}", "paid", "paid"},
	} {
		if got := subjectsHint(tc.text, tc.subject); got != tc.want {
			t.Errorf("subjectsHint(%q, %q) = %q, want %q", tc.text, tc.subject, got, tc.want)
		}
	}
}

// TestRelayAMQPSaysWhatIsMissing: a RabbitMQ with no queue bound for the
// routing key, or without the exchange, makes the relay say once what to
// declare; once the test declared it, the message arrives.
func TestRelayAMQPSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:5672"
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
		testdb.MissingService(t, "RabbitMQ on "+addr, err)
	} else {
		c.Close()
	}
	tests := []struct {
		name     string
		exchange bool // the relay publishes to an exchange of its own, not the default one
		hint     string
		reason   string // of the holds counted in /metrics
	}{
		{"no queue bound", false, "no queue is bound to exchange", "unroutable"},
		{"no exchange", true, "RabbitMQ has no exchange", "no_exchange"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			queue := fmt.Sprintf("mqlite-cli-test-%d", time.Now().UnixNano())
			exchange := ""
			if tc.exchange {
				exchange = queue + "-x"
			}
			defer func() {
				_, _ = ch.QueueDelete(queue, false, false, false)
				if exchange != "" {
					_ = ch.ExchangeDelete(exchange, false, false)
				}
			}()
			path := relayFile(t, outbox.Message{Body: []byte("hello")})
			rctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(rctx, []string{"relay", "--db", path, "--queue", "events", "--sink", "amqp",
					"--amqp-url", "amqp://guest:guest@" + addr + "/", "--exchange", exchange, "--routing-key", queue,
					"--metrics-addr", "127.0.0.1:0"},
					strings.NewReader(""), &stdout, &stderr)
			}()
			stderr.waitFor(t, tc.hint)
			scrapeUntil(t, &stderr, done, `mqlite_relay_holds_total{queue="events",reason="`+tc.reason+`",sink="amqp"}`)

			// Declare what was missing: the message then arrives.
			if exchange != "" {
				if err := ch.ExchangeDeclare(exchange, "direct", false, false, false, false, nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if exchange != "" {
				if err := ch.QueueBind(queue, queue, exchange, false, nil); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ch.Consume(queue, "", true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-got:
				if string(d.Body) != "hello" {
					t.Fatalf("body %q", d.Body)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the message did not arrive; stderr %s", stderr.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit code %d; stderr %s", code, stderr.String())
			}
			if n := strings.Count(stderr.String(), tc.hint); n != 1 {
				t.Errorf("the hint came %d times, want once:\n%s", n, stderr.String())
			}
		})
	}
}
