package inbound_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
)

// gate is a request body that tells when it is first read and then holds
// the reader until release is closed: a slow sender.
type gate struct {
	r       io.Reader
	read    atomic.Bool
	started chan<- string // gets name at the first Read
	name    string
	release <-chan struct{}
}

func (g *gate) Read(p []byte) (int, error) {
	if !g.read.Swap(true) && g.started != nil {
		g.started <- g.name
	}
	if g.release != nil {
		<-g.release
	}
	return g.r.Read(p)
}

// signed is a request to sender whose body, of the given content, is read
// through body; signed by oldSecret at now with id.
func signed(t testing.TB, source, id, content string, now time.Time, body io.Reader) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/inbound/"+source, body)
	req.ContentLength = int64(len(content))
	wh, err := standardwebhooks.NewWebhook(oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, now, []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	return req
}

// boundSetup is a store with queues "a" and "b" (a 3-day window) and a
// handler of senders "a" and "b" over them, under cfg's bounds, each
// sender's share perSender and its body limit maxBody.
func boundSetup(t *testing.T, cfg inbound.Config, perSender, maxBody int64) (*testdb.Bundle, *http.ServeMux, *inbound.Handler) {
	t.Helper()
	b := testdb.Open(t, mqlite.Config{})
	for _, name := range []string{"a", "b"} {
		b.Queue(t, name, mqlite.QueueOptions{DedupWindow: 72 * time.Hour})
		cfg.Senders = append(cfg.Senders, inbound.Sender{Name: name, Queue: name, Secrets: []string{oldSecret}, MaxHeldBytes: perSender, MaxBodyBytes: maxBody})
	}
	h, err := inbound.New(context.Background(), b.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	return b, mux, h
}

// TestHeldBytesBound: many slow senders at once hold no more body bytes
// than MaxHeldBytes (over all senders) and a sender's MaxHeldBytes (its
// share): a request past either is answered 503 with Retry-After at once,
// its body never read, while the requests that fit are read and stored
// once their senders finish. The gauge shows the bytes held.
func TestHeldBytesBound(t *testing.T) {
	t.Parallel()
	const size, fit, senders = 4 << 10, 10, 50
	b, mux, h := boundSetup(t, inbound.Config{MaxHeldBytes: fit * size}, 6*size, size)
	content := strings.Repeat("x", size)
	started := make(chan string, senders)
	answered := make(chan string, senders)
	release := make(chan struct{})
	type outcome struct {
		code   int
		retry  string
		bodyRd bool
	}
	var mu sync.Mutex
	outcomes := map[string]outcome{}
	var wg sync.WaitGroup
	for i := range senders {
		source := []string{"a", "b"}[i%2]
		name := fmt.Sprintf("%s-%d", source, i)
		g := &gate{r: strings.NewReader(content), started: started, name: name, release: release}
		req := signed(t, source, name, content, testdb.Start, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			mu.Lock()
			outcomes[name] = outcome{rec.Code, rec.Header().Get("Retry-After"), g.read.Load()}
			mu.Unlock()
			answered <- name
		}()
	}
	// Every sender is either reading (held by its gate) or answered.
	reading := map[string]bool{}
	for range senders {
		select {
		case name := <-started:
			reading[name] = true
		case <-answered:
		}
	}
	held := gauge(t, h, "mqlite_inbound_held_bytes")
	perSender := map[byte]int{}
	for name := range reading {
		perSender[name[0]]++
	}
	t.Logf("%d of %d senders read at once (%v by source), %v bytes held, bound %d", len(reading), senders, perSender, held, fit*size)
	if len(reading) > fit || held > fit*size || perSender['a'] > 6 || perSender['b'] > 6 {
		close(release)
		wg.Wait()
		t.Fatalf("%d bodies read at once (%v by source), %v bytes held: want at most %d (6 a source)", len(reading), perSender, held, fit)
	}
	if held != float64(len(reading)*size) {
		t.Errorf("gauge %v, want %d", held, len(reading)*size)
	}
	close(release)
	wg.Wait()
	refused := 0
	for name, o := range outcomes {
		switch {
		case reading[name] && o.code != http.StatusOK:
			t.Errorf("%s was read and answered %d, want 200", name, o.code)
		case !reading[name] && (o.code != http.StatusServiceUnavailable || o.retry == "" || o.bodyRd):
			t.Errorf("%s: %+v, want 503 with Retry-After and its body unread", name, o)
		case !reading[name]:
			refused++
		}
	}
	if n := testdb.Int(t, b.Store.DB(), `SELECT count(*) FROM mqlite_messages`); n != int64(len(reading)) {
		t.Errorf("%d messages stored, %d read", n, len(reading))
	}
	if held := gauge(t, h, "mqlite_inbound_held_bytes"); held != 0 {
		t.Errorf("%v bytes held after every answer", held)
	}
	if c := gauge(t, h, `mqlite_inbound_refused_total`); c != float64(refused) {
		t.Errorf("refusals counted %v, want %d", c, refused)
	}
	// Room is back: a sender that was refused is taken now.
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, signed(t, "a", "late", content, testdb.Start, strings.NewReader(content)))
	if rec.Code != http.StatusOK {
		t.Fatalf("after the others: %d %s", rec.Code, rec.Body)
	}
}

// TestHeldBytesShare: a sender that holds its share leaves room to the
// others: sender a's slow senders get 503 past their share while sender b
// is still taken.
func TestHeldBytesShare(t *testing.T) {
	t.Parallel()
	const size = 1 << 10
	_, mux, _ := boundSetup(t, inbound.Config{MaxHeldBytes: 8 * size}, 2*size, size)
	content := strings.Repeat("y", size)
	started := make(chan string, 2)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		g := &gate{r: strings.NewReader(content), started: started, release: release}
		req := signed(t, "a", fmt.Sprint("a-", i), content, testdb.Start, g)
		wg.Add(1)
		go func() { defer wg.Done(); mux.ServeHTTP(httptest.NewRecorder(), req) }()
		<-started
	}
	defer func() { close(release); wg.Wait() }()
	g := &gate{r: strings.NewReader(content)}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, signed(t, "a", "a-2", content, testdb.Start, g))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || g.read.Load() {
		t.Fatalf("a past its share: %d %q, read %v; want 503 with Retry-After, unread", rec.Code, rec.Header().Get("Retry-After"), g.read.Load())
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, signed(t, "b", "b-0", content, testdb.Start, strings.NewReader(content)))
	if rec.Code != http.StatusOK {
		t.Fatalf("b while a holds its share: %d %s", rec.Code, rec.Body)
	}
}

// gauge sums the values of the handler's metric name.
func gauge(t *testing.T, h *inbound.Handler, name string) float64 {
	t.Helper()
	sum := 0.0
	for k, v := range (bundle{h: h}).values(t) {
		if strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// TestUnknownSenderAlike: a request to a sender nobody configured is
// answered as the same request to a configured one whose secret does not
// verify it: the same status, text and headers, and its body read or not
// alike; a request refused on its headers (none, malformed, stale, a body
// over the limit) has its body left unread for both.
func TestUnknownSenderAlike(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	for _, tc := range []struct {
		name     string
		edit     func(r *http.Request)
		wantRead bool
	}{
		{"bad signature", func(r *http.Request) { r.Header.Set("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJl") }, true},
		{"no signature", func(r *http.Request) { r.Header.Del("webhook-signature") }, false},
		{"no id", func(r *http.Request) { r.Header.Del("webhook-id") }, false},
		{"malformed timestamp", func(r *http.Request) { r.Header.Set("webhook-timestamp", "soon") }, false},
		{"stale", func(r *http.Request) {
			r.Header.Set("webhook-timestamp", strconv.FormatInt(testdb.Start.Add(-time.Hour).Unix(), 10))
		}, false},
		{"body over the limit", func(r *http.Request) { r.ContentLength = inbound.DefaultMaxBodyBytes + 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]*httptest.ResponseRecorder
			var read [2]bool
			for i, source := range []string{"acme", "nobody"} {
				// The known sender gets a request signed by a key it does
				// not hold, so that both are refused.
				content := `{"n":1}`
				g := &gate{r: strings.NewReader(content)}
				req := signed(t, source, "evt_1", content, testdb.Start, g)
				wh, _ := standardwebhooks.NewWebhook(otherSecret)
				sig, _ := wh.Sign("evt_1", testdb.Start, []byte(content))
				req.Header.Set("webhook-signature", sig)
				tc.edit(req)
				got[i] = httptest.NewRecorder()
				b.mux.ServeHTTP(got[i], req)
				read[i] = g.read.Load()
			}
			k, u := got[0], got[1]
			if k.Code != u.Code || k.Body.String() != u.Body.String() {
				t.Errorf("known %d %s, unknown %d %s", k.Code, k.Body, u.Code, u.Body)
			}
			if k.Code/100 != 4 {
				t.Errorf("status %d, want a refusal", k.Code)
			}
			hk, hu := k.Header().Clone(), u.Header().Clone()
			for _, h := range []http.Header{hk, hu} {
				h.Del("Date")
			}
			keys := func(h http.Header) []string {
				var out []string
				for k, v := range h {
					out = append(out, k+"="+strings.Join(v, ","))
				}
				slices.Sort(out)
				return out
			}
			if !slices.Equal(keys(hk), keys(hu)) {
				t.Errorf("headers: known %v, unknown %v", keys(hk), keys(hu))
			}
			if read[0] != read[1] || read[0] != tc.wantRead {
				t.Errorf("body read: known %v, unknown %v; want %v for both", read[0], read[1], tc.wantRead)
			}
		})
	}
	if n := len(b.messages(t)); n != 0 {
		t.Fatalf("%d messages stored", n)
	}
}

// TestBodyLimitIsTheBody: a body of MaxBodyBytes is taken with the
// longest webhook-id and Content-Type the handler stores beside it (the
// limit is the body's, not the body and its metadata); a request the
// queue would refuse (an id too long or not UTF-8, a Content-Type too
// long) is a 4xx refused on its headers, its body unread, nothing stored.
func TestBodyLimitIsTheBody(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	content := strings.Repeat("z", inbound.DefaultMaxBodyBytes)
	longID := strings.Repeat("i", mqlite.MaxMessageIDLen)
	req := signed(t, "acme", longID, content, testdb.Start, strings.NewReader(content))
	req.Header.Set("Content-Type", strings.Repeat("<", inbound.MaxContentTypeLen)) // each < is 6 bytes of JSON
	rec := httptest.NewRecorder()
	b.mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("a body of MaxBodyBytes (%d): %d %s, want 200", len(content), rec.Code, rec.Body)
	}
	for _, tc := range []struct {
		name, id, ct string
	}{
		{"id too long", strings.Repeat("i", mqlite.MaxMessageIDLen+1), "application/json"},
		{"id not UTF-8", "evt_\xff", "application/json"},
		{"content type too long", "evt_2", strings.Repeat("t", inbound.MaxContentTypeLen+1)},
		{"content type not UTF-8", "evt_3", "text/\xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gate{r: strings.NewReader("{}")}
			req := signed(t, "acme", tc.id, "{}", testdb.Start, g)
			req.Header.Set("Content-Type", tc.ct)
			rec := httptest.NewRecorder()
			b.mux.ServeHTTP(rec, req)
			if rec.Code/100 != 4 || rec.Code == http.StatusUnauthorized || g.read.Load() {
				t.Fatalf("%d %s, body read %v: want a 4xx (not 401) on the headers", rec.Code, rec.Body, g.read.Load())
			}
		})
	}
	if n := len(b.messages(t)); n != 1 {
		t.Fatalf("%d messages stored, want 1", n)
	}
}

// TestDefaultRetryHorizon: a sender that states no RetryHorizon is taken
// to be retried for DefaultRetryHorizon (days, as the common providers
// do): a queue with the default 10-minute window is refused at New with an
// error that says what to do, one of 3 days is taken.
func TestDefaultRetryHorizon(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "short", mqlite.QueueOptions{})
	b.Queue(t, "days", mqlite.QueueOptions{DedupWindow: inbound.DefaultRetryHorizon})
	_, err := inbound.New(context.Background(), b.Store, inbound.Config{Senders: []inbound.Sender{{Name: "acme", Queue: "short", Secrets: []string{oldSecret}}}})
	if !errors.Is(err, inbound.ErrInvalidConfig) || !strings.Contains(err.Error(), "72h") || !strings.Contains(err.Error(), "DedupWindow") {
		t.Fatalf("a 10m window without a horizon: %v, want ErrInvalidConfig naming 72h", err)
	}
	t.Logf("refused: %v", err)
	if _, err := inbound.New(context.Background(), b.Store, inbound.Config{Senders: []inbound.Sender{{Name: "acme", Queue: "days", Secrets: []string{oldSecret}}}}); err != nil {
		t.Fatalf("a 3-day window: %v", err)
	}
}

// signAt is the signature by oldSecret of a request whose timestamp header
// is ts, whatever its unit.
func signAt(t *testing.T, id, ts, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(oldSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestSkewMessage: a stale timestamp's refusal says how far it is and
// which way, and a timestamp in milliseconds does not overflow the text.
func TestSkewMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	for _, tc := range []struct {
		ts        string
		want, not string
	}{
		{strconv.FormatInt(testdb.Start.Add(10*time.Minute).Unix(), 10), "10m0s ahead", "-10m"},
		{strconv.FormatInt(testdb.Start.Add(-10*time.Minute).Unix(), 10), "10m0s behind", "-10m"},
		{strconv.FormatInt(testdb.Start.UnixMilli(), 10), "milliseconds", "2562047h"},
		{strconv.FormatInt(-testdb.Start.UnixMilli(), 10), "behind", "2562047h"},
	} {
		req := signed(t, "acme", "evt_1", "{}", testdb.Start, strings.NewReader("{}"))
		req.Header.Set("webhook-timestamp", tc.ts)
		req.Header.Set("webhook-signature", signAt(t, "evt_1", tc.ts, "{}"))
		rec := httptest.NewRecorder()
		b.mux.ServeHTTP(rec, req)
		msg := rec.Body.String()
		if rec.Code != http.StatusUnauthorized || !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.not) {
			t.Errorf("timestamp %s: %d %s, want %q and no %q", tc.ts, rec.Code, msg, tc.want, tc.not)
		}
	}
}
