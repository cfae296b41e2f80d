package inbound_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/mqlitetest"
)

// An outsider's view of package inbound, from its documentation: the
// default retry horizon, unknown sender names that answer like known ones,
// the bound on bodies held at once, and the text of a skewed timestamp.

const outsideSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func outsideSign(t *testing.T, secret, id, ts string, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// outsideMux is a store with queue "in" (a dedup window of 3 days) and a
// handler for sender "acme" mounted as the broker mounts it.
func outsideMux(t *testing.T, cfg inbound.Config, src inbound.Sender) (*mqlitetest.Clock, http.Handler) {
	t.Helper()
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	if err := st.CreateQueue(t.Context(), "in", mqlite.QueueOptions{DedupWindow: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	src.Name, src.Queue, src.Secrets = "acme", "in", []string{outsideSecret}
	cfg.Senders = []inbound.Sender{src}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := inbound.New(t.Context(), st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	return clock, mux
}

// The default horizon is days, and a queue whose window is shorter is
// refused at New, with or without a horizon given.
func TestOutsideRetryHorizonDefault(t *testing.T) {
	if inbound.DefaultRetryHorizon < 48*time.Hour {
		t.Fatalf("DefaultRetryHorizon %v, want days", inbound.DefaultRetryHorizon)
	}
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	for _, w := range []time.Duration{10 * time.Minute, 24 * time.Hour} {
		name := "w" + strconv.Itoa(int(w/time.Minute))
		if err := st.CreateQueue(t.Context(), name, mqlite.QueueOptions{DedupWindow: w}); err != nil {
			t.Fatal(err)
		}
		_, err := inbound.New(t.Context(), st, inbound.Config{Senders: []inbound.Sender{{Name: "a", Queue: name, Secrets: []string{outsideSecret}}}})
		if !errors.Is(err, inbound.ErrInvalidConfig) || !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("a queue with a %v window and no horizon: %v, want ErrInvalidConfig", w, err)
		}
	}
	// No window at all (-1), whatever the horizon.
	if err := st.CreateQueue(t.Context(), "none", mqlite.QueueOptions{DedupWindow: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := inbound.New(t.Context(), st, inbound.Config{Senders: []inbound.Sender{{Name: "a", Queue: "none", Secrets: []string{outsideSecret}, RetryHorizon: time.Minute}}}); !errors.Is(err, inbound.ErrInvalidConfig) {
		t.Errorf("a queue without a window: %v, want ErrInvalidConfig", err)
	}
}

// A name nobody configured answers exactly like "acme" for every refusal an
// outsider can provoke without the secret.
func TestOutsideUnknownSenderLooksKnown(t *testing.T) {
	clock, mux := outsideMux(t, inbound.Config{}, inbound.Sender{})
	now := clock.Now().Unix()
	body := []byte(`{"type":"payment"}`)
	type req struct {
		name string
		hdr  map[string]string
		body []byte
	}
	ts := strconv.FormatInt(now, 10)
	cases := []req{
		{"no headers", nil, body},
		{"bad signature", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, body},
		{"signed with another secret", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": outsideSign(t, "whsec_dGhpcyBpcyBub3QgdGhlIHNvdXJjZSdzIGtleQ==", "msg_1", ts, body)}, body},
		{"stale", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": strconv.FormatInt(now-3600, 10), "webhook-signature": "v1,AAAA"}, body},
		{"millisecond timestamp", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": strconv.FormatInt(now*1000, 10), "webhook-signature": "v1,AAAA"}, body},
		{"timestamp not a number", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": "soon", "webhook-signature": "v1,AAAA"}, body},
		{"id too long", map[string]string{"webhook-id": strings.Repeat("x", 10000), "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, body},
		{"body too large", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, bytes.Repeat([]byte("x"), 2<<20)},
	}
	do := func(source string, c req) (int, string, http.Header) {
		r := httptest.NewRequest("POST", "/v1/inbound/"+source, bytes.NewReader(c.body))
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code, w.Body.String(), w.Header()
	}
	for _, c := range cases {
		ks, kb, kh := do("acme", c)
		for _, unknown := range []string{"acne", "ACME", "nobody", strings.Repeat("z", 64)} {
			us, ub, uh := do(unknown, c)
			if ks != us || kb != ub {
				t.Errorf("%s: known %d %q, unknown %q: %d %q", c.name, ks, kb, unknown, us, ub)
			}
			for _, h := range []string{"Content-Type", "Retry-After", "Cache-Control", "WWW-Authenticate"} {
				if kh.Get(h) != uh.Get(h) {
					t.Errorf("%s: header %s: known %q, unknown %q", c.name, h, kh.Get(h), uh.Get(h))
				}
			}
		}
		if ks/100 != 4 {
			t.Errorf("%s: %d, want a 4xx", c.name, ks)
		}
	}
}

// The skew of a stale timestamp says which way it is, and a millisecond
// timestamp (a common mistake) reads sensibly rather than overflowing.
func TestOutsideSkewText(t *testing.T) {
	clock, mux := outsideMux(t, inbound.Config{}, inbound.Sender{})
	now := clock.Now().Unix()
	for _, c := range []struct {
		ts   int64
		want string
	}{
		{now + 3600, "ahead"},
		{now - 3600, "behind"},
		{now * 1000, "ahead"},
		{-now, "behind"},
	} {
		r := httptest.NewRequest("POST", "/v1/inbound/acme", strings.NewReader("{}"))
		r.Header.Set("webhook-id", "msg_1")
		r.Header.Set("webhook-timestamp", strconv.FormatInt(c.ts, 10))
		r.Header.Set("webhook-signature", "v1,AAAA")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		t.Logf("ts %d: %d %s", c.ts, w.Code, w.Body.String())
		if w.Code != http.StatusUnauthorized {
			t.Errorf("ts %d: %d, want 401", c.ts, w.Code)
		}
		if !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("ts %d: %s, want it to say %q", c.ts, w.Body.String(), c.want)
		}
		if strings.Contains(w.Body.String(), "-9223") || strings.Contains(w.Body.String(), "2562047h") {
			t.Errorf("ts %d: an overflowed duration: %s", c.ts, w.Body.String())
		}
	}
}

// gateBody is a request body that says when it is first read, then blocks
// until released.
type gateBody struct {
	once    sync.Once
	reading chan struct{}
	release chan struct{}
	r       io.Reader
}

func (g *gateBody) Read(p []byte) (int, error) {
	g.once.Do(func() { close(g.reading) })
	<-g.release
	return g.r.Read(p)
}

// Past the bytes of bodies held at once, a request is 503 with Retry-After
// and its body is never read; once the held body is answered, room is back.
func TestOutsideHeldBytesBound(t *testing.T) {
	clock, mux := outsideMux(t, inbound.Config{MaxHeldBytes: 4096}, inbound.Sender{MaxBodyBytes: 4096, MaxHeldBytes: -1})
	ts := strconv.FormatInt(clock.Now().Unix(), 10)
	body := bytes.Repeat([]byte("x"), 3000)
	newReq := func(id string, rd io.Reader, n int64) *http.Request {
		r := httptest.NewRequest("POST", "/v1/inbound/acme", rd)
		r.ContentLength = n
		r.Header.Set("webhook-id", id)
		r.Header.Set("webhook-timestamp", ts)
		r.Header.Set("webhook-signature", outsideSign(t, outsideSecret, id, ts, body))
		return r
	}
	g := &gateBody{reading: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(body)}
	first := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		mux.ServeHTTP(first, newReq("msg_held", g, int64(len(body))))
	}()
	<-g.reading // the first body is held
	for _, source := range []string{"acme", "nobody"} {
		second := &gateBody{reading: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(body)}
		close(second.release)
		r := newReq("msg_2", second, int64(len(body)))
		r.URL.Path = "/v1/inbound/" + source
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s past the bound: %d Retry-After %q, want 503 with Retry-After", source, w.Code, w.Header().Get("Retry-After"))
		}
		select {
		case <-second.reading:
			t.Errorf("%s: the refused body was read", source)
		default:
		}
	}
	close(g.release)
	<-done
	if first.Code != 200 {
		t.Fatalf("the held request: %d %s", first.Code, first.Body.String())
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, newReq("msg_2", bytes.NewReader(body), int64(len(body))))
	if w.Code != 200 {
		t.Fatalf("after the held body was answered: %d %s, want 200", w.Code, w.Body.String())
	}
}

// A signed body of exactly the sender's limit, with the longest id and
// Content-Type the handler takes (escaped when stored), is taken: the
// limit is the body's. A provider's retry is a duplicate with the same seq;
// the same id with another body is 409; a signed request the queue could
// not store is a 4xx, never a 5xx the provider would retry.
func TestOutsideSignedEdges(t *testing.T) {
	clock, mux := outsideMux(t, inbound.Config{}, inbound.Sender{})
	ts := strconv.FormatInt(clock.Now().Unix(), 10)
	post := func(id, ctype string, body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/inbound/acme", bytes.NewReader(body))
		r.Header.Set("webhook-id", id)
		r.Header.Set("webhook-timestamp", ts)
		r.Header.Set("webhook-signature", outsideSign(t, outsideSecret, id, ts, body))
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	id := strings.Repeat("<", mqlite.MaxMessageIDLen)
	ctype := "application/json; x=" + strings.Repeat(">", inbound.MaxContentTypeLen-len("application/json; x="))
	body := bytes.Repeat([]byte("b"), inbound.DefaultMaxBodyBytes)
	w := post(id, ctype, body)
	if w.Code != 200 {
		t.Fatalf("a body of exactly the limit with the longest id and Content-Type: %d %s, want 200", w.Code, w.Body.String())
	}
	var first, again struct {
		Seq       int64 `json:"seq"`
		Duplicate bool  `json:"duplicate"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &first); err != nil || first.Seq == 0 {
		t.Fatalf("answer %s: %v", w.Body.String(), err)
	}
	w = post(id, ctype, body)
	if err := json.Unmarshal(w.Body.Bytes(), &again); w.Code != 200 || err != nil || again.Seq != first.Seq || !again.Duplicate {
		t.Errorf("the provider's retry: %d %s, want 200, a duplicate of seq %d", w.Code, w.Body.String(), first.Seq)
	}
	other := append(bytes.Clone(body[:len(body)-1]), 'c')
	if w := post(id, ctype, other); w.Code != 409 {
		t.Errorf("the same id with another body: %d %s, want 409", w.Code, w.Body.String())
	}
	if w := post("msg_big", "", append(body, 'x')); w.Code != 413 {
		t.Errorf("one byte over the limit: %d %s, want 413", w.Code, w.Body.String())
	}
	for name, c := range map[string]struct{ id, ctype string }{
		"id too long":            {strings.Repeat("i", mqlite.MaxMessageIDLen+1), ""},
		"id not UTF-8":           {"id\xff", ""},
		"Content-Type too long":  {"msg_ct", strings.Repeat("a", inbound.MaxContentTypeLen+1)},
		"Content-Type not UTF-8": {"msg_ct2", "text/\xff"},
	} {
		if w := post(c.id, c.ctype, []byte("{}")); w.Code/100 != 4 {
			t.Errorf("%s, signed: %d %s, want a 4xx", name, w.Code, w.Body.String())
		}
	}
}

// Each sender has its share of the held bytes: one sender past its share
// is 503 while another is still taken. A body without a Content-Length
// counts as the sender's MaxBodyBytes.
func TestOutsideHeldBytesPerSender(t *testing.T) {
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	for _, q := range []string{"a", "b"} {
		if err := st.CreateQueue(t.Context(), q, mqlite.QueueOptions{DedupWindow: 72 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := inbound.New(t.Context(), st, inbound.Config{MaxHeldBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Senders: []inbound.Sender{
			{Name: "a", Queue: "a", Secrets: []string{outsideSecret}, MaxBodyBytes: 1000, MaxHeldBytes: 1000},
			{Name: "b", Queue: "b", Secrets: []string{outsideSecret}, MaxBodyBytes: 1000, MaxHeldBytes: 1000},
		}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	ts := strconv.FormatInt(clock.Now().Unix(), 10)
	body := []byte("{}")
	newReq := func(source, id string, rd io.Reader, n int64) *http.Request {
		r := httptest.NewRequest("POST", "/v1/inbound/"+source, rd)
		r.ContentLength = n // -1: unknown (chunked)
		r.Header.Set("webhook-id", id)
		r.Header.Set("webhook-timestamp", ts)
		r.Header.Set("webhook-signature", outsideSign(t, outsideSecret, id, ts, body))
		return r
	}
	g := &gateBody{reading: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(body)}
	first := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		mux.ServeHTTP(first, newReq("a", "held", g, -1)) // no length: counts 1000
	}()
	<-g.reading
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, newReq("a", "a2", bytes.NewReader(body), int64(len(body))))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a past its share: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, newReq("b", "b1", bytes.NewReader(body), int64(len(body))))
	if w.Code != 200 {
		t.Errorf("b while a is past its share: %d %s, want 200", w.Code, w.Body.String())
	}
	close(g.release)
	<-done
	if first.Code != 200 {
		t.Fatalf("the held request: %d %s", first.Code, first.Body.String())
	}
	// A chunked body over the limit is 413, and gives its room back.
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, newReq("a", "big", bytes.NewReader(bytes.Repeat([]byte("x"), 5000)), -1))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the limit: %d, want 413", w.Code)
	}
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, newReq("a", "a3", bytes.NewReader(body), int64(len(body))))
	if w.Code != 200 {
		t.Errorf("a after its held bodies were answered: %d %s, want 200", w.Code, w.Body.String())
	}
}
