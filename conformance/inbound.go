package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/wire"
)

// The inbound area's secrets: the sender's, and one it does not hold.
const (
	inboundSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	foreignSecret = "whsec_dGhpcyBpcyBub3QgdGhlIHNvdXJjZSdzIGtleQ=="
)

// webhooks is a subtest's inbound handler for sender "acme" into queue
// "in" (a window of inbound.DefaultRetryHorizon, the default horizon).
type webhooks struct {
	k *kit
	h http.Handler
}

// openInbound opens the implementation with queue "in" and its inbound
// handler, or skips the subtest.
func openInbound(t *testing.T, h Harness) webhooks {
	t.Helper()
	skipWithout(t, h.Features.WithoutInbound)
	k := open(t, h)
	if k.in.Inbound == nil {
		t.Fatal("conformance: Instance.Inbound is nil without Features.WithoutInbound")
	}
	k.queue("in", mqlite.QueueOptions{DedupWindow: inbound.DefaultRetryHorizon})
	hd, err := k.in.Inbound(t, []inbound.Sender{{Name: "acme", Queue: "in", Secrets: []string{inboundSecret}}})
	k.must(err, "inbound handler")
	return webhooks{k, hd}
}

// delivery is one webhook as its provider sends it.
type delivery struct {
	id, body string
	at       time.Time
	secret   string // signs it
	sent     string // the body sent, when not body (tampered after signing)
}

// post sends d to sender "acme" and returns the status and the answer.
func (w webhooks) post(d delivery) (int, wire.SendResult, string) {
	w.k.t.Helper()
	sent := d.body
	if d.sent != "" {
		sent = d.sent
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/inbound/acme", strings.NewReader(sent))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", d.id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(d.at.Unix(), 10))
	wh, err := standardwebhooks.NewWebhook(d.secret)
	w.k.must(err, "signer")
	sig, err := wh.Sign(d.id, d.at, []byte(d.body))
	w.k.must(err, "sign")
	req.Header.Set("webhook-signature", sig)
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, req)
	var res wire.SendResult
	if rec.Code == http.StatusOK {
		w.k.must(json.Unmarshal(rec.Body.Bytes(), &res), "the answer "+rec.Body.String())
	}
	return rec.Code, res, rec.Body.String()
}

// nothingWritten fails unless queue "in" holds no message at all.
func (w webhooks) nothingWritten(what string) {
	w.k.t.Helper()
	if s := w.k.stats("in"); s.Total() != 0 {
		w.k.t.Fatalf("%s: %d messages written, want none", what, s.Total())
	}
}

// inboundTests: a signed delivery is stored once, with its webhook-id as
// the MessageID; the provider's retry, or the same request replayed,
// inside the window is a duplicate; a bad signature or a stale timestamp
// is refused with nothing written; a queue whose window does not cover the
// retry horizon is refused before any request.
var inboundTests = []subtest{
	{"SignedAcceptedOnce", func(t *testing.T, h Harness) {
		w := openInbound(t, h)
		d := delivery{id: "evt_1", body: `{"amount":1299}`, at: w.k.clock.Now(), secret: inboundSecret}
		code, res, text := w.post(d)
		if code != http.StatusOK || res.Duplicate || res.Seq == 0 {
			t.Fatalf("a signed delivery: %d %s, want 200 with a new seq", code, text)
		}
		msgs := w.k.peek("in")
		if len(msgs) != 1 || msgs[0].Seq != res.Seq || msgs[0].MessageID != "evt_1" || string(msgs[0].Body) != d.body ||
			msgs[0].Properties[inbound.ContentTypeProperty] != "application/json" {
			t.Fatalf("stored %+v, want one message evt_1 with the body and its Content-Type", msgs)
		}
	}},
	{"ReplayDeduplicatedByID", func(t *testing.T, h Harness) {
		w := openInbound(t, h)
		d := delivery{id: "evt_2", body: `{"amount":5}`, at: w.k.clock.Now(), secret: inboundSecret}
		_, first, _ := w.post(d)
		// The same bytes again (a replay inside the tolerance), then the
		// provider's retries, signed anew, up to the horizon's end.
		w.k.advance(time.Minute)
		if code, res, text := w.post(d); code != http.StatusOK || !res.Duplicate || res.Seq != first.Seq {
			t.Fatalf("the same request again: %d %s, want a duplicate of seq %d", code, text, first.Seq)
		}
		for _, after := range []time.Duration{time.Hour, 24 * time.Hour, inbound.DefaultRetryHorizon - 26*time.Hour} {
			w.k.advance(after)
			d.at = w.k.clock.Now()
			if code, res, text := w.post(d); code != http.StatusOK || !res.Duplicate || res.Seq != first.Seq {
				t.Fatalf("a retry at %v: %d %s, want a duplicate of seq %d", d.at, code, text, first.Seq)
			}
		}
		if s := w.k.stats("in"); s.Total() != 1 {
			t.Fatalf("%d messages, want 1", s.Total())
		}
	}},
	{"BadSignatureWritesNothing", func(t *testing.T, h Harness) {
		w := openInbound(t, h)
		now := w.k.clock.Now()
		for _, d := range []delivery{
			{id: "evt_3", body: `{}`, at: now, secret: foreignSecret},
			{id: "evt_3", body: `{"amount":1}`, at: now, secret: inboundSecret, sent: `{"amount":1000000}`},
		} {
			if code, _, text := w.post(d); code != http.StatusUnauthorized {
				t.Fatalf("signed by %s, sent %q: %d %s, want 401", d.secret[:10], d.sent, code, text)
			}
		}
		w.nothingWritten("bad signatures")
		// The id was not taken: the genuine delivery is stored after them.
		if code, res, _ := w.post(delivery{id: "evt_3", body: `{"amount":1}`, at: now, secret: inboundSecret}); code != http.StatusOK || res.Duplicate {
			t.Fatalf("the genuine delivery after the forgeries: %d %+v", code, res)
		}
	}},
	{"StaleTimestampRefused", func(t *testing.T, h Harness) {
		w := openInbound(t, h)
		now := w.k.clock.Now()
		for _, at := range []time.Time{now.Add(-inbound.DefaultTolerance - time.Second), now.Add(inbound.DefaultTolerance + time.Second)} {
			if code, _, text := w.post(delivery{id: "evt_4", body: `{}`, at: at, secret: inboundSecret}); code != http.StatusUnauthorized {
				t.Fatalf("a timestamp %v from now: %d %s, want 401", at.Sub(now), code, text)
			}
		}
		w.nothingWritten("stale timestamps")
		// A captured request replayed past the tolerance: refused too.
		d := delivery{id: "evt_5", body: `{}`, at: now, secret: inboundSecret}
		if code, _, _ := w.post(d); code != http.StatusOK {
			t.Fatalf("the original: %d", code)
		}
		w.k.advance(inbound.DefaultTolerance + time.Second)
		if code, _, text := w.post(d); code != http.StatusUnauthorized {
			t.Fatalf("the replay past the tolerance: %d %s, want 401", code, text)
		}
	}},
	{"WindowMustCoverHorizon", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutInbound)
		k := open(t, h)
		k.queue("short", mqlite.QueueOptions{}) // the default window, 10m
		_, err := k.in.Inbound(t, []inbound.Sender{{Name: "acme", Queue: "short", Secrets: []string{inboundSecret}}})
		if !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Fatalf("a 10m window under the default horizon: %v, want ErrInvalidArgument", err)
		}
		if _, err := k.in.Inbound(t, []inbound.Sender{{Name: "acme", Queue: "short", Secrets: []string{inboundSecret},
			RetryHorizon: 10 * time.Minute}}); err != nil {
			t.Fatalf("a 10m window over a 10m horizon: %v", err)
		}
	}},
}
