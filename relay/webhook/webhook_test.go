package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	"github.com/mqlite/mqlite/relay/webhook"
)

// Two secrets, as during a rotation: every request carries a signature by
// each.
var secrets = []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24="}

// now is the retry backoff of the tests that retry: none, so that a failed
// message comes back at once on the fake clock.
var now = consumer.Backoff{Initial: -1}

// request is what the receiver got.
type request struct {
	header http.Header
	body   []byte
}

// bundle is one test's store, receiver and relay.
type bundle struct {
	*testdb.Bundle
	obs  *relaytest.Observer
	reqs chan request // every request, in arrival order
}

// setup starts a receiver answering with answer (called with the request
// and how many came before it), a webhook sink with cfg pointed at it, and
// a relay with ropts over a fresh queue.
func setup(t *testing.T, cfg webhook.Config, ropts relay.Config, answer func(w http.ResponseWriter, r *http.Request, n int)) *bundle {
	t.Helper()
	b := &bundle{Bundle: relaytest.Open(t, mqlite.QueueOptions{}), reqs: make(chan request, 10_000)}
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request: %v", err)
		}
		b.reqs <- request{header: r.Header.Clone(), body: body}
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		answer(w, r, i)
	}))
	t.Cleanup(srv.Close)
	cfg.URL = srv.URL
	if cfg.Secrets == nil {
		cfg.Secrets = secrets
	}
	sink, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	b.obs = relaytest.Relay(t, b.Store, sink, ropts)
	return b
}

func ok(w http.ResponseWriter, _ *http.Request, _ int) {}

// next returns the next request the receiver got.
func (b *bundle) next(t *testing.T) request {
	t.Helper()
	select {
	case r := <-b.reqs:
		return r
	case <-time.After(relaytest.Timeout):
		t.Fatal("timed out waiting for a request")
		return request{}
	}
}

func TestSignedDelivery(t *testing.T) {
	t.Parallel()
	for _, envelope := range []bool{false, true} {
		t.Run(fmt.Sprint("envelope=", envelope), func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{Envelope: envelope}, relay.Config{}, ok)
			body := []byte(`{"order":42}`)
			seq := relaytest.Send(t, b.Store, outbox.Message{
				Body: body, GroupID: "customer-7", Subject: "orders.created",
				Properties: map[string]string{"tenant": "acme", "content-type": "application/json", "bad key": "x"},
			})[0]
			got := b.next(t)
			b.obs.WaitFor(t, "the completion", func(c relaytest.Counts) bool { return c.Completed == 1 })

			// Every secret's signature verifies on its own, with the
			// library's Verify; a tampered body verifies with none.
			if sigs := strings.Fields(got.header.Get("webhook-signature")); len(sigs) != len(secrets) {
				t.Fatalf("signatures %q, want one per secret", sigs)
			}
			for _, sec := range secrets {
				wh, err := standardwebhooks.NewWebhook(sec)
				if err != nil {
					t.Fatal(err)
				}
				if err := wh.Verify(got.body, got.header); err != nil {
					t.Fatalf("verify with %s: %v", sec, err)
				}
				tampered := append([]byte(nil), got.body...)
				tampered[len(tampered)-2] ^= 1
				if err := wh.Verify(tampered, got.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
					t.Fatalf("tampered body: verify %v, want ErrNoMatchingSignature", err)
				}
			}
			other, _ := standardwebhooks.NewWebhook("whsec_bm90IHRoZSBzZWNyZXQ=")
			if err := other.Verify(got.body, got.header); err == nil {
				t.Fatal("a foreign secret verified the request")
			}

			id := fmt.Sprintf("%s:%d", relaytest.Queue, seq)
			want := map[string]string{
				"webhook-id": id, relay.HeaderSeq: strconv.FormatInt(seq, 10), relay.HeaderQueue: relaytest.Queue,
				relay.HeaderDeliveryCount: "1", relay.HeaderSubject: "orders.created", relay.HeaderGroupID: "customer-7",
				webhook.PropertyHeaderPrefix + "Tenant": "acme", "Content-Type": "application/json",
			}
			for k, v := range want {
				if g := got.header.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if envelope {
				var env webhook.Envelope
				if err := json.Unmarshal(got.body, &env); err != nil {
					t.Fatal(err)
				}
				if env.ID != id || env.Seq != seq || string(env.Body) != string(body) || env.Properties["tenant"] != "acme" || env.Subject != "orders.created" {
					t.Fatalf("envelope %+v", env)
				}
			} else if string(got.body) != string(body) {
				t.Fatalf("body %q, want %q", got.body, body)
			}
			relaytest.Empty(t, b.Store)
		})
	}
}

func TestRetriesA500ThenDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, relay.Config{Backoff: now}, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			http.Error(w, "database down", http.StatusInternalServerError)
		}
	})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("x"), MessageID: "order-1"})
	c := b.obs.WaitFor(t, "the delivery", func(c relaytest.Counts) bool { return c.Completed == 1 })
	first, second := b.next(t), b.next(t)
	for i, r := range []request{first, second} {
		if id, dc := r.header.Get("webhook-id"), r.header.Get(relay.HeaderDeliveryCount); id != "order-1" || dc != strconv.Itoa(i+1) {
			t.Fatalf("request %d: id %q delivery count %q, want the stable id order-1 and %d", i, id, dc, i+1)
		}
	}
	if c.Abandoned != 1 || !strings.Contains(c.Causes[0].Error(), "HTTP 500") {
		t.Fatalf("counts %+v, want one abandon for HTTP 500", c)
	}
	relaytest.Empty(t, b.Store)
}

func TestDeadLettersA400WithTheAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, relay.Config{}, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Error(w, "field total missing", http.StatusBadRequest)
	})
	seq := relaytest.Send(t, b.Store, outbox.Message{Body: []byte("{}")})[0]
	b.obs.WaitFor(t, "the dead letter", func(c relaytest.Counts) bool { return c.Rejected == 1 })
	dead, err := b.Store.PeekDeadLetters(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Seq != seq || dead[0].DeadLetterReason != "webhook: HTTP 400" ||
		dead[0].DeadLetterDescription != "400 Bad Request: field total missing" || dead[0].DeliveryCount != 1 {
		t.Fatalf("dead letters %+v", dead)
	}
}

func TestHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		want         time.Duration // within a second below, for an HTTP date
	}{
		{"seconds", "120", 120 * time.Second},
		{"date", "", 90 * time.Second}, // set to the wall clock + 90s below
		{"capped", "86400", 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{MaxRetryAfter: 10 * time.Minute}, relay.Config{Backoff: now}, func(w http.ResponseWriter, r *http.Request, n int) {
				if string(r.Header.Get("webhook-id")) != "slow" || n > 0 {
					return
				}
				h := tc.header
				if h == "" {
					h = time.Now().Add(tc.want).UTC().Format(http.TimeFormat)
				}
				w.Header().Set("Retry-After", h)
				w.WriteHeader(http.StatusTooManyRequests)
			})
			seq := relaytest.Send(t, b.Store, outbox.Message{Body: []byte("slow"), MessageID: "slow"})[0]
			c := b.obs.WaitFor(t, "the abandon", func(c relaytest.Counts) bool { return c.Abandoned == 1 })
			if d := c.Delays[0]; d > tc.want || d < tc.want-time.Second {
				t.Fatalf("retry delay %v, want %v", d, tc.want)
			}
			msgs, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 1 || msgs[0].Seq != seq || msgs[0].State != mqlite.StateScheduled ||
				!msgs[0].VisibleAt.Equal(b.Clock.Now().Add(c.Delays[0]).Truncate(time.Millisecond)) {
				t.Fatalf("queue %+v, want seq %d scheduled after %v", msgs, seq, c.Delays[0])
			}
			b.next(t)

			// Just before the delay ends the message stays put: a commit
			// wakes the relay, which delivers the new message only.
			b.Clock.Advance(c.Delays[0] - time.Millisecond)
			relaytest.Send(t, b.Store, outbox.Message{Body: []byte("poke 1")})
			b.obs.WaitFor(t, "the first poke", func(c relaytest.Counts) bool { return c.Completed == 1 })
			if r := b.next(t); string(r.body) != "poke 1" {
				t.Fatalf("got %q before the Retry-After passed", r.body)
			}
			b.Clock.Advance(time.Millisecond)
			relaytest.Send(t, b.Store, outbox.Message{Body: []byte("poke 2")})
			b.obs.WaitFor(t, "the retry", func(c relaytest.Counts) bool { return c.Completed == 3 })
			relaytest.Empty(t, b.Store)
		})
	}
}

func TestRetriesATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{Timeout: 100 * time.Millisecond}, relay.Config{Backoff: now}, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			<-r.Context().Done() // hang until the sink gives up
		}
	})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("x")})
	c := b.obs.WaitFor(t, "the delivery", func(c relaytest.Counts) bool { return c.Completed == 1 })
	// The first attempt hangs, so it times out; on a busy machine a later
	// one may too (100ms is short under -race), and is retried the same
	// way: every abandon is a timeout, and there is at least one.
	if c.Abandoned == 0 {
		t.Fatalf("counts %+v, want an abandon for the timeout", c)
	}
	for _, cause := range c.Causes {
		if !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("abandoned for %v, want only timeouts", cause)
		}
	}
	relaytest.Empty(t, b.Store)
}

func TestKeepsGroupOrderWhileOthersOvertake(t *testing.T) {
	t.Parallel()
	const perGroup = 20
	groups := []string{"slow", "a", "b", "c"}
	var mu sync.Mutex
	inFlight := map[string]int{}
	order := map[string][]int64{}
	othersDone := make(chan struct{})
	var closeOnce sync.Once
	b := setup(t, webhook.Config{}, relay.Config{Concurrency: 8, MaxBatch: 1}, func(w http.ResponseWriter, r *http.Request, n int) {
		g := r.Header.Get(relay.HeaderGroupID)
		seq, _ := strconv.ParseInt(r.Header.Get(relay.HeaderSeq), 10, 64)
		mu.Lock()
		inFlight[g]++
		if g != "" && inFlight[g] > 1 {
			t.Errorf("group %s: two messages in flight", g)
		}
		order[g] = append(order[g], seq)
		first := g == "slow" && len(order[g]) == 1
		done := 0
		for _, o := range groups[1:] {
			if len(order[o]) == perGroup {
				done++
			}
		}
		mu.Unlock()
		if done == len(groups)-1 {
			closeOnce.Do(func() { close(othersDone) })
		}
		if first {
			<-othersDone // the other groups overtake the slow group's first message
		}
		mu.Lock()
		inFlight[g]--
		mu.Unlock()
	})
	var msgs []outbox.Message
	for i := range perGroup {
		for _, g := range groups {
			msgs = append(msgs, outbox.Message{Body: fmt.Appendf(nil, "%s-%d", g, i), GroupID: g})
		}
		msgs = append(msgs, outbox.Message{Body: fmt.Appendf(nil, "free-%d", i)})
	}
	relaytest.Send(t, b.Store, msgs...)
	b.obs.WaitFor(t, "every delivery", func(c relaytest.Counts) bool { return c.Completed == len(msgs) })
	mu.Lock()
	defer mu.Unlock()
	for _, g := range groups {
		if len(order[g]) != perGroup || !slices.IsSorted(order[g]) {
			t.Fatalf("group %s arrived as %v, want %d in seq order", g, order[g], perGroup)
		}
	}
	relaytest.Empty(t, b.Store)
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"30", 30 * time.Second},
		{" 30 ", 30 * time.Second},
		{"3600", time.Hour},
		{"3601", time.Hour},
		{"99999999999999999", time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), time.Hour},
		{"soon", 0},
	} {
		if got := webhook.RetryAfter(tc.in, now, time.Hour); got != tc.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{
		200: false, 301: false, 400: false, 401: false, 404: false, 409: false, 422: false,
		408: true, 425: true, 429: true, 500: true, 502: true, 503: true, 599: true,
	} {
		if got := webhook.Retryable(status); got != want {
			t.Errorf("Retryable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestRedirectIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, relay.Config{}, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("x")})
	b.obs.WaitFor(t, "the dead letter", func(c relaytest.Counts) bool { return c.Rejected == 1 })
	if n := len(b.reqs); n != 1 {
		t.Fatalf("%d requests, want 1: redirects are not followed", n)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]webhook.Config{
		"no URL":           {Secrets: secrets},
		"relative URL":     {URL: "/hook", Secrets: secrets},
		"ftp URL":          {URL: "ftp://127.0.0.1/x", Secrets: secrets},
		"no secret":        {URL: "http://127.0.0.1/x"},
		"no whsec_":        {URL: "http://127.0.0.1/x", Secrets: []string{"c2VjcmV0"}},
		"bad base64":       {URL: "http://127.0.0.1/x", Secrets: []string{"whsec_!!"}},
		"negative timeout": {URL: "http://127.0.0.1/x", Secrets: secrets, Timeout: -1},
		"negative cap":     {URL: "http://127.0.0.1/x", Secrets: secrets, MaxConcurrent: -1},
	} {
		if _, err := webhook.New(cfg); !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.Is(err, webhook.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}
