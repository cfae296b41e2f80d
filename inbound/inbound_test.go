package inbound_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The secrets of the tests: old and new (a rotation), and one the sender
// does not know.
const (
	oldSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret   = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	otherSecret = "whsec_dGhpcyBpcyBub3QgdGhlIHNvdXJjZSdzIGtleQ=="
)

// bundle is a store with queue "in" (a window of 3 days, the default
// retry horizon) and a
// handler for sender "acme" on it, mounted as the broker mounts it.
type bundle struct {
	*testdb.Bundle
	h   *inbound.Handler
	mux *http.ServeMux
}

func setup(t testing.TB, src inbound.Sender) bundle {
	t.Helper()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "in", mqlite.QueueOptions{DedupWindow: inbound.DefaultRetryHorizon})
	if src.Name == "" {
		src = inbound.Sender{Name: "acme", Queue: "in", Secrets: []string{oldSecret, newSecret}}
	}
	h, err := inbound.New(context.Background(), b.Store, inbound.Config{Senders: []inbound.Sender{src}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	return bundle{b, h, mux}
}

// request is one webhook as a provider sends it.
type request struct {
	source string
	id     string
	ts     time.Time
	body   string
	// secrets sign it, one signature each; none: no signature header.
	secrets []string
	// tamper replaces the body after signing.
	tamper string
}

func (b bundle) post(t *testing.T, r request) (int, wire.SendResult, wire.ErrorResponse) {
	t.Helper()
	sent := r.body
	if r.tamper != "" {
		sent = r.tamper
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/inbound/"+r.source, strings.NewReader(sent))
	req.Header.Set("Content-Type", "application/json")
	if r.id != "" {
		req.Header.Set("webhook-id", r.id)
	}
	if !r.ts.IsZero() {
		req.Header.Set("webhook-timestamp", strconv.FormatInt(r.ts.Unix(), 10))
	}
	var sigs []string
	for _, sec := range r.secrets {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(r.id, r.ts, []byte(r.body))
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	if sigs != nil {
		req.Header.Set("webhook-signature", strings.Join(sigs, " "))
	}
	rec := httptest.NewRecorder()
	b.mux.ServeHTTP(rec, req)
	var ok wire.SendResult
	var bad wire.ErrorResponse
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &ok); err != nil {
			t.Fatalf("answer %q: %v", rec.Body.String(), err)
		}
	} else if err := json.Unmarshal(rec.Body.Bytes(), &bad); err != nil {
		t.Fatalf("answer %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return rec.Code, ok, bad
}

// messages is the queue's messages.
func (b bundle) messages(t *testing.T) []mqlite.Message {
	t.Helper()
	msgs, err := b.Store.Peek(context.Background(), "in", mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// counts gathers the handler's counters and gauges: "name{label values}"
// -> value.
func (b bundle) counts(t *testing.T) map[string]float64 { return b.values(t) }

// values gathers the handler's counters and gauges: "name{label values}"
// -> value.
func (b bundle) values(t *testing.T) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// TestSignature: a request is stored only when a secret of its sender
// verifies its signature and its timestamp is within the tolerance (5m)
// of the store's clock; every refusal is 401 (413 for a body over the
// limit), stores nothing and counts under its reason. Either secret of a
// rotation verifies, alone or beside a signature of an unknown key.
func TestSignature(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", inbound.DefaultMaxBodyBytes+1)
	for _, tc := range []struct {
		name   string
		req    request
		status int
		reason string // the metric's; "" for a stored message
	}{
		{"old secret", request{secrets: []string{oldSecret}}, 200, ""},
		{"new secret (rotation)", request{secrets: []string{newSecret}}, 200, ""},
		{"an unknown key beside the new", request{secrets: []string{otherSecret, newSecret}}, 200, ""},
		{"at the tolerance's edge, past", request{secrets: []string{oldSecret}, ts: testdb.Start.Add(-5 * time.Minute)}, 200, ""},
		{"at the tolerance's edge, ahead", request{secrets: []string{oldSecret}, ts: testdb.Start.Add(5 * time.Minute)}, 200, ""},
		{"an unknown key", request{secrets: []string{otherSecret}}, 401, inbound.RefusedBadSignature},
		{"body changed after signing", request{secrets: []string{oldSecret}, tamper: `{"amount":1000000}`}, 401, inbound.RefusedBadSignature},
		{"no signature", request{}, 401, inbound.RefusedUnsigned},
		{"no webhook-id", request{secrets: []string{oldSecret}, id: "-"}, 401, inbound.RefusedUnsigned},
		{"no timestamp", request{secrets: []string{oldSecret}, ts: time.Unix(0, 0)}, 401, inbound.RefusedUnsigned},
		{"stale: a replay a second past the tolerance", request{secrets: []string{oldSecret}, ts: testdb.Start.Add(-5*time.Minute - time.Second)}, 401, inbound.RefusedStale},
		{"from the future", request{secrets: []string{oldSecret}, ts: testdb.Start.Add(5*time.Minute + time.Second)}, 401, inbound.RefusedStale},
		{"unknown sender", request{source: "nobody", secrets: []string{oldSecret}}, 401, inbound.RefusedUnknownSender},
		{"oversized body", request{secrets: []string{oldSecret}, body: long}, 413, inbound.RefusedTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, inbound.Sender{})
			r := tc.req
			if r.source == "" {
				r.source = "acme"
			}
			switch r.id {
			case "":
				r.id = "evt_1"
			case "-":
				r.id = ""
			}
			switch {
			case r.ts.IsZero():
				r.ts = testdb.Start
			case r.ts.Unix() == 0:
				r.ts = time.Time{}
			}
			if r.body == "" {
				r.body = `{"amount":1}`
			}
			status, res, bad := b.post(t, r)
			if status != tc.status {
				t.Fatalf("status %d %+v, want %d", status, bad, tc.status)
			}
			msgs := b.messages(t)
			counts := b.counts(t)
			if tc.reason == "" {
				if len(msgs) != 1 || msgs[0].Seq != res.Seq || msgs[0].MessageID != "evt_1" || string(msgs[0].Body) != r.body {
					t.Fatalf("stored %+v, answered %+v", msgs, res)
				}
				if counts["mqlite_inbound_accepted_total{source=acme}"] != 1 {
					t.Errorf("counters %v", counts)
				}
				return
			}
			if len(msgs) != 0 {
				t.Fatalf("a refused request stored %d messages", len(msgs))
			}
			wantReason := wire.ReasonBadSignature
			if status == 413 {
				wantReason = wire.ReasonBodyTooLarge
			}
			if bad.Error.Reason != wantReason {
				t.Errorf("reason %q, want %q (%s)", bad.Error.Reason, wantReason, bad.Error.Message)
			}
			source := "acme"
			if r.source != "acme" {
				source = "" // an unknown name is never a label
			}
			if key := "mqlite_inbound_refused_total{reason=" + tc.reason + ",source=" + source + "}"; counts[key] != 1 {
				t.Errorf("counters %v, want %s 1", counts, key)
			}
		})
	}
}

// TestProviderRetries: a provider's retry (the same webhook-id, signed
// anew) inside the queue's dedup window is a duplicate: 200 with the
// original's seq, nothing stored; the same id with another body is 409
// duplicate_conflict and the original stays. The control: past the window
// the same retry is a second message, which is why New asks for a window
// that covers the provider's retry horizon.
func TestProviderRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	first := request{source: "acme", id: "evt_7", ts: testdb.Start, body: `{"n":7}`, secrets: []string{oldSecret}}
	status, orig, _ := b.post(t, first)
	if status != 200 || orig.Duplicate {
		t.Fatalf("first: %d %+v", status, orig)
	}

	// The retries come a minute apart, each signed at its own time, some
	// with the new secret (the provider rotated in between).
	for i, sec := range []string{oldSecret, newSecret, newSecret} {
		b.Clock.Advance(time.Minute)
		retry := first
		retry.ts, retry.secrets = b.Clock.Now(), []string{sec}
		status, res, bad := b.post(t, retry)
		if status != 200 || !res.Duplicate || res.Seq != orig.Seq {
			t.Fatalf("retry %d: %d %+v %+v, want a duplicate of seq %d", i, status, res, bad, orig.Seq)
		}
	}
	conflict := first
	conflict.ts, conflict.body = b.Clock.Now(), `{"n":8}`
	status, _, bad := b.post(t, conflict)
	if status != http.StatusConflict || bad.Error.Reason != "duplicate_conflict" {
		t.Fatalf("same id, another body: %d %+v", status, bad)
	}
	if msgs := b.messages(t); len(msgs) != 1 || string(msgs[0].Body) != `{"n":7}` {
		t.Fatalf("stored %+v, want the original alone", msgs)
	}
	counts := b.counts(t)
	if counts["mqlite_inbound_accepted_total{source=acme}"] != 1 || counts["mqlite_inbound_duplicates_total{source=acme}"] != 3 ||
		counts["mqlite_inbound_refused_total{reason=conflict,source=acme}"] != 1 {
		t.Errorf("counters %v", counts)
	}

	// The control: a retry past the window (3 days) is a second message.
	b.Clock.Advance(inbound.DefaultRetryHorizon)
	late := first
	late.ts = b.Clock.Now()
	if status, res, _ := b.post(t, late); status != 200 || res.Duplicate || res.Seq == orig.Seq {
		t.Fatalf("a retry past the window: %d %+v, want a new message", status, res)
	}
	if n := len(b.messages(t)); n != 2 {
		t.Fatalf("%d messages after a retry past the window, want 2 (the control)", n)
	}
}

// TestReplay: the very same request sent again (a replay of captured
// bytes) is a duplicate while its timestamp is within the tolerance, and
// refused once it is not; nothing is stored twice either way.
func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	r := request{source: "acme", id: "evt_9", ts: testdb.Start, body: `{}`, secrets: []string{newSecret}}
	if status, res, _ := b.post(t, r); status != 200 || res.Duplicate {
		t.Fatalf("first: %d %+v", status, res)
	}
	b.Clock.Advance(5 * time.Minute)
	if status, res, _ := b.post(t, r); status != 200 || !res.Duplicate {
		t.Fatalf("a replay inside the tolerance: %d %+v, want a duplicate", status, res)
	}
	b.Clock.Advance(time.Second)
	if status, _, bad := b.post(t, r); status != 401 || !strings.Contains(bad.Error.Message, "tolerance") {
		t.Fatalf("a replay past the tolerance: %d %+v, want 401", status, bad)
	}
	if n := len(b.messages(t)); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
}

// TestContentType: the request's Content-Type is the message's property.
func TestContentType(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	b.post(t, request{source: "acme", id: "evt_1", ts: testdb.Start, body: `{}`, secrets: []string{oldSecret}})
	msgs := b.messages(t)
	if len(msgs) != 1 || msgs[0].Properties[inbound.ContentTypeProperty] != "application/json" {
		t.Fatalf("stored %+v", msgs)
	}
}

// TestWindowLost: a queue whose dedup window was turned off after New
// refuses the sender's requests with 503 (the provider retries; nothing
// is stored that a retry would double).
func TestWindowLost(t *testing.T) {
	t.Parallel()
	b := setup(t, inbound.Sender{})
	if err := b.Store.UpdateQueue(context.Background(), "in", mqlite.QueueOptions{DedupWindow: -1}); err != nil {
		t.Fatal(err)
	}
	status, _, bad := b.post(t, request{source: "acme", id: "evt_1", ts: testdb.Start, body: `{}`, secrets: []string{oldSecret}})
	if status != 503 || bad.Error.Reason != wire.ReasonNoDedupWindow {
		t.Fatalf("%d %+v, want 503 %s", status, bad, wire.ReasonNoDedupWindow)
	}
	if n := len(b.messages(t)); n != 0 {
		t.Fatalf("%d messages stored", n)
	}
	if c := b.counts(t)["mqlite_inbound_refused_total{reason=no_dedup_window,source=acme}"]; c != 1 {
		t.Errorf("refused %v", c)
	}
}

// TestConfig: New refuses a sender it could not take exactly once by id
// (no queue, no window, a window shorter than twice the tolerance or than
// the retry horizon) and every malformed field, with an error that
// matches ErrInvalidConfig and mqlite.ErrInvalidArgument and never quotes a
// secret.
func TestConfig(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "in", mqlite.QueueOptions{})                                // 10m
	b.Queue(t, "off", mqlite.QueueOptions{DedupWindow: -1})                // none
	b.Queue(t, "short", mqlite.QueueOptions{DedupWindow: 9 * time.Minute}) // under 2 x 5m
	b.Queue(t, "days", mqlite.QueueOptions{DedupWindow: 72 * time.Hour})   // a provider's three days
	// good's provider retries for a minute: the tolerance sets the window.
	good := inbound.Sender{Name: "acme", Queue: "in", Secrets: []string{oldSecret}, RetryHorizon: time.Minute}
	with := func(f func(s *inbound.Sender)) []inbound.Sender {
		s := good
		f(&s)
		return []inbound.Sender{s}
	}
	for _, tc := range []struct {
		name    string
		sources []inbound.Sender
		want    string // in the error; "" for none
	}{
		{"good", []inbound.Sender{good}, ""},
		{"no senders", nil, ""},
		{"three days of retries", with(func(s *inbound.Sender) { s.Queue, s.RetryHorizon = "days", 72*time.Hour }), ""},
		{"no queue", with(func(s *inbound.Sender) { s.Queue = "nope" }), "nope"},
		{"no window", with(func(s *inbound.Sender) { s.Queue = "off" }), "DedupWindow"},
		{"window under twice the tolerance", with(func(s *inbound.Sender) { s.Queue = "short" }), "needs 10m"},
		{"window under the retry horizon", with(func(s *inbound.Sender) { s.RetryHorizon = 24 * time.Hour }), "needs 24h"},
		{"shorter tolerance, shorter window", with(func(s *inbound.Sender) { s.Queue, s.Tolerance = "short", time.Minute }), ""},
		{"no secrets", with(func(s *inbound.Sender) { s.Secrets = nil }), "no Secrets"},
		{"not whsec_", with(func(s *inbound.Sender) { s.Secrets = []string{"hunter2hunter2hunter2hunter2"} }), "secret 1"},
		{"not base64", with(func(s *inbound.Sender) { s.Secrets = []string{oldSecret, "whsec_!!!!!!!!!!!!!!!!!!!!!!!!!!!!"} }), "secret 2"},
		{"too short", with(func(s *inbound.Sender) { s.Secrets = []string{"whsec_c2hvcnQ="} }), "secret 1"},
		{"bad name", with(func(s *inbound.Sender) { s.Name = "a/b" }), "source name"},
		{"empty name", with(func(s *inbound.Sender) { s.Name = "" }), "source name"},
		{"negative tolerance", with(func(s *inbound.Sender) { s.Tolerance = -time.Second }), "Tolerance"},
		{"negative body limit", with(func(s *inbound.Sender) { s.MaxBodyBytes = -1 }), "MaxBodyBytes"},
		{"negative horizon", with(func(s *inbound.Sender) { s.RetryHorizon = -time.Second }), "RetryHorizon"},
		{"twice the same name", []inbound.Sender{good, good}, "twice"},
		{"the default horizon over a 10m window", with(func(s *inbound.Sender) { s.RetryHorizon = 0 }), "needs 72h"},
		{"a body limit with no room for the id", with(func(s *inbound.Sender) { s.MaxBodyBytes = mqlite.DefaultMaxMessageBytes }), "MaxBodyBytes"},
		{"a share under the body limit", with(func(s *inbound.Sender) { s.MaxHeldBytes = 1 << 10 }), "MaxHeldBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := inbound.New(context.Background(), b.Store, inbound.Config{Senders: tc.sources})
			if tc.want == "" {
				if err != nil || h == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, inbound.ErrInvalidConfig) || !errors.Is(err, mqlite.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalidConfig with %q", err, tc.want)
			}
			for _, s := range tc.sources {
				for _, sec := range s.Secrets {
					if strings.Contains(err.Error(), strings.TrimPrefix(sec, "whsec_")) {
						t.Fatalf("the error quotes a secret: %v", err)
					}
				}
			}
		})
	}
	if _, err := inbound.New(context.Background(), b.Store, inbound.Config{MaxHeldBytes: 1 << 10}); err != nil {
		t.Errorf("no sender, a small bound: %v", err)
	}
	if _, err := inbound.New(context.Background(), nil, inbound.Config{}); !errors.Is(err, inbound.ErrInvalidConfig) {
		t.Errorf("no store: %v", err)
	}
}

// FuzzInbound sends arbitrary headers and bodies to the handler: it never
// panics, answers 200 only for a request signed by the sender's secret
// within the tolerance whose id and Content-Type the queue can store (400
// for those it cannot), and stores exactly the messages it answered 200
// for (none for a duplicate).
func FuzzInbound(f *testing.F) {
	f.Add("evt_1", int64(0), "", "{}", "application/json", true)
	f.Add("evt_1", int64(-301), "", "{}", "", true)
	f.Add("", int64(0), "v1,AAAA", "x", "text/plain", false)
	f.Add("evt\x00", int64(0), "v1,", "\xff", "", true)
	f.Add(strings.Repeat("i", 300), int64(3), "v2,x v1,y", "", "a\r\nb", true)
	b := setup(f, inbound.Sender{})
	wh, _ := standardwebhooks.NewWebhook(oldSecret)
	stored := 0
	f.Fuzz(func(t *testing.T, id string, skew int64, sig, body, ct string, sign bool) {
		ts := time.Unix(b.Clock.Now().Unix()+skew, 0) // whole seconds, as the header carries them
		req := httptest.NewRequest(http.MethodPost, "/v1/inbound/acme", strings.NewReader(body))
		req.Header["Webhook-Id"] = []string{id}
		req.Header["Webhook-Timestamp"] = []string{strconv.FormatInt(ts.Unix(), 10)}
		req.Header["Content-Type"] = []string{ct}
		if sign {
			s, _ := wh.Sign(id, ts, []byte(body))
			sig = strings.TrimSpace(sig + " " + s)
		}
		req.Header["Webhook-Signature"] = []string{sig}
		rec := httptest.NewRecorder()
		b.mux.ServeHTTP(rec, req)
		var res wire.SendResult
		if rec.Code == 200 {
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if !res.Duplicate {
				stored++
			}
		}
		storable := len(id) <= mqlite.MaxMessageIDLen && utf8.ValidString(id) && len(ct) <= inbound.MaxContentTypeLen && utf8.ValidString(ct)
		valid := sign && id != "" && skew >= -300 && skew <= 300 && storable
		if rec.Code == 200 && !valid {
			t.Fatalf("answered 200 to an invalid request: %d %s", rec.Code, rec.Body)
		}
		if !valid && rec.Code != 401 && (storable || rec.Code != 400) {
			t.Fatalf("an unsigned, stale or unstorable request: %d %s, want 401 (400 for an id or Content-Type the queue refuses)", rec.Code, rec.Body)
		}
		msgs, err := b.Store.Peek(context.Background(), "in", mqlite.PeekParams{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != stored {
			t.Fatalf("%d messages stored, %d answered as new", len(msgs), stored)
		}
	})
}

// ExampleNew takes the signed webhooks of one sender into queue
// "payments" and serves them on a mux of the application's.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbound")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	// The default DedupWindow (10m) covers the default tolerance's replays;
	// this provider retries for three days.
	err = st.CreateQueue(ctx, "payments", mqlite.QueueOptions{DedupWindow: 72 * time.Hour})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		panic(err)
	}
	h, err := inbound.New(ctx, st, inbound.Config{Senders: []inbound.Sender{{
		Name: "payments-provider", Queue: "payments", RetryHorizon: 72 * time.Hour,
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	}}})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	fmt.Println("POST /v1/inbound/payments-provider is served")
	// Output: POST /v1/inbound/payments-provider is served
}

// TestNoCommitNoSuccess: a webhook the store cannot commit (here, a store
// closed under the handler) is never answered 2xx: the provider retries
// it. The same request on an open store is the control.
func TestNoCommitNoSuccess(t *testing.T) {
	t.Parallel()
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(context.Background(), "in", mqlite.QueueOptions{DedupWindow: inbound.DefaultRetryHorizon}); err != nil {
		t.Fatal(err)
	}
	h, err := inbound.New(context.Background(), st, inbound.Config{Senders: []inbound.Sender{{Name: "acme", Queue: "in", Secrets: []string{oldSecret}}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/inbound/{source}", h)
	b := bundle{h: h, mux: mux}
	r := request{source: "acme", id: "evt_1", ts: time.Now(), body: `{}`, secrets: []string{oldSecret}}
	if status, _, bad := b.post(t, r); status != http.StatusOK {
		t.Fatalf("the control, on an open store: %d %+v", status, bad)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	r.id = "evt_2"
	if status, _, bad := b.post(t, r); status != http.StatusServiceUnavailable || bad.Error.Reason != "closed" {
		t.Fatalf("on a closed store: %d %+v, want 503 closed", status, bad)
	}
	if c := b.counts(t)["mqlite_inbound_refused_total{reason=error,source=acme}"]; c != 1 {
		t.Errorf("refused %v", c)
	}
}
