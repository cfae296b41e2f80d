package broker_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
)

const inboundSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestInboundRoute: POST /v1/inbound/{source} takes a signed webhook into
// the sender's queue without an access key (the signature is the
// authentication) and answers 200 once it is committed; a refusal is 401
// with nothing stored and one debug log line that names neither the body
// nor a secret; /metrics counts both.
func TestInboundRoute(t *testing.T) {
	// The provider retries for a minute: q's window (10m) covers it.
	f := start(t, broker.Config{Inbound: []inbound.Sender{{Name: "acme", Queue: "q", Secrets: []string{inboundSecret}, RetryHorizon: time.Minute}}})
	wh, err := standardwebhooks.NewWebhook(inboundSecret)
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string, sign bool) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/inbound/acme", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		now := f.tb.Clock.Now()
		req.Header.Set("webhook-id", "evt_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJl")
		if sign {
			sig, err := wh.Sign("evt_1", now, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("webhook-signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(`{"secret-looking":"body-1"}`, false); got != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d, want 401", got)
	}
	if n := testdb.Int(t, f.tb.Store.DB(), `SELECT count(*) FROM mqlite_messages`); n != 0 {
		t.Fatalf("a refusal stored %d messages", n)
	}
	if got := post(`{"n":1}`, true); got != http.StatusOK {
		t.Fatalf("signed: %d, want 200", got)
	}
	if got := post(`{"n":1}`, true); got != http.StatusOK {
		t.Fatalf("a retry: %d, want 200", got)
	}
	msgs, err := f.tb.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "evt_1" {
		t.Fatalf("stored %+v, %v", msgs, err)
	}
	logs := f.log.String()
	if n := strings.Count(logs, "inbound: refused"); n != 1 || strings.Contains(logs, "body-1") || strings.Contains(logs, "MfKQ9r8") {
		t.Fatalf("%d refusal lines, or a body or secret logged:\n%s", n, logs)
	}
	resp := f.send(t, http.MethodGet, "/metrics", f.keys["admin"], nil)
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{
		`mqlite_inbound_accepted_total{source="acme"} 1`,
		`mqlite_inbound_duplicates_total{source="acme"} 1`,
		`mqlite_inbound_refused_total{reason="bad_signature",source="acme"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestInboundConfig: New refuses a sender whose queue has no dedup window
// (a provider's retry would be a second message), as a bad Config.
func TestInboundConfig(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "nodedup", mqlite.QueueOptions{DedupWindow: -1})
	tb.Queue(t, "week", mqlite.QueueOptions{DedupWindow: 7 * 24 * time.Hour})
	for _, tc := range []struct {
		queue   string
		horizon time.Duration
		ok      bool
	}{
		{"week", 72 * time.Hour, true},
		{"nodedup", 0, false},
		{"week", 8 * 24 * time.Hour, false},
		{"missing", 0, false},
	} {
		srv, err := broker.New(broker.Config{Store: tb.Store, Inbound: []inbound.Sender{{
			Name: "acme", Queue: tc.queue, RetryHorizon: tc.horizon, Secrets: []string{inboundSecret}}}})
		if tc.ok != (err == nil) || !tc.ok && (!errors.Is(err, broker.ErrInvalidConfig) || !errors.Is(err, mqlite.ErrInvalidArgument) ||
			strings.Count(err.Error(), "invalid config") != 1) {
			t.Errorf("queue %s, horizon %v: %v", tc.queue, tc.horizon, err)
		}
		_ = srv // New starts nothing; the store closes with the test
	}
}

// FuzzInboundRoute sends arbitrary paths, headers and bodies to the
// broker's inbound route, with no key: it never panics, answers 200 only
// to a request signed by the sender's secret, and stores nothing else.
func FuzzInboundRoute(f *testing.F) {
	f.Add("acme", "evt_1", "{}", true)
	f.Add("acme", "evt_1", "{}", false)
	f.Add("nobody", "evt_2", "x", true)
	f.Add("acme/../../v1/keys", "", "", false)
	f.Add("%2e%2e", "evt\r\n", "\xff", true)
	tb := testdb.Open(f, mqlite.Config{})
	tb.Queue(f, "q", mqlite.QueueOptions{DedupWindow: inbound.DefaultRetryHorizon})
	srv, err := broker.New(broker.Config{Store: tb.Store, Inbound: []inbound.Sender{{Name: "acme", Queue: "q", Secrets: []string{inboundSecret}}}})
	if err != nil {
		f.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(inboundSecret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, source, id, body string, sign bool) {
		now := tb.Clock.Now()
		req := httptest.NewRequest(http.MethodPost, "/v1/inbound/acme", strings.NewReader(body))
		req.URL.Path = "/v1/inbound/" + source
		req.Header["Webhook-Id"] = []string{id}
		req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(now.Unix(), 10)}
		if sign {
			sig, _ := wh.Sign(id, now, []byte(body))
			req.Header["Webhook-Signature"] = []string{sig}
		}
		before := testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_messages`)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		after := testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_messages`)
		if rec.Code/100 == 2 && (!sign || id == "" || source != "acme") {
			t.Fatalf("source %q, id %q, signed %v: %d %s", source, id, sign, rec.Code, rec.Body)
		}
		if after != before && rec.Code != http.StatusOK {
			t.Fatalf("stored %d messages, answered %d", after-before, rec.Code)
		}
	})
}

// TestInboundHeldBytesOverHTTP: over a real connection, a slow sender
// holds its body's room (Config.MaxInboundBytes); the next webhook is 503
// inbound_busy with Retry-After at once, its body never asked for, and
// /metrics shows the bytes held. Once the slow body ends it is stored.
func TestInboundHeldBytesOverHTTP(t *testing.T) {
	const size = 4 << 10
	f := start(t, broker.Config{MaxInboundBytes: size, Inbound: []inbound.Sender{{Name: "acme", Queue: "q",
		Secrets: []string{inboundSecret}, RetryHorizon: time.Minute, MaxBodyBytes: size}}})
	wh, err := standardwebhooks.NewWebhook(inboundSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("s", size)
	request := func(id string, rd io.Reader) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/inbound/acme", rd)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		now := f.tb.Clock.Now()
		sig, err := wh.Sign(id, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		return req
	}
	pr, pw := io.Pipe()
	slow := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(request("evt_slow", pr))
		if err != nil {
			slow <- 0
			return
		}
		_ = resp.Body.Close()
		slow <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(body[:10])); err != nil { // the server is reading it
		t.Fatal(err)
	}
	held := func() bool {
		resp := f.send(t, http.MethodGet, "/metrics", f.keys["admin"], nil)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return strings.Contains(string(b), "mqlite_inbound_held_bytes "+strconv.Itoa(size))
	}
	for deadline := time.Now().Add(time.Minute); !held(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow sender's room never showed in mqlite_inbound_held_bytes")
		}
	}
	// With Expect: 100-continue the body leaves only once the broker
	// starts reading it: a refusal before that leaves it unsent.
	unread := &countingReader{r: strings.NewReader(body)}
	next := request("evt_next", unread)
	next.Header.Set("Expect", "100-continue")
	tr := &http.Transport{ExpectContinueTimeout: time.Hour}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(next)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(answer), "inbound_busy") {
		t.Fatalf("past the bound: %d %q %s, want 503 inbound_busy with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), answer)
	}
	if n := unread.n.Load(); n != 0 {
		t.Fatalf("the refused webhook's body was asked for: %d bytes sent", n)
	}
	if _, err := pw.Write([]byte(body[10:])); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	if code := <-slow; code != http.StatusOK {
		t.Fatalf("the slow sender: %d, want 200", code)
	}
	msgs, err := f.tb.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "evt_slow" {
		t.Fatalf("stored %+v, %v; want evt_slow alone", msgs, err)
	}
}

// countingReader counts the bytes read through it (by the transport's
// goroutine).
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
