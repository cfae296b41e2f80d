package broker_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
)

// An outsider's view of the broker's inbound door: an unknown sender name
// answers like a known one, whatever else the request carries (a bogus
// access key, an odd name), and the answer gives nothing away.
func TestOutsideInboundUnknownLooksKnown(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "in", mqlite.QueueOptions{DedupWindow: 72 * time.Hour})
	url := serve(t, broker.Config{Store: tb.Store, Logger: quiet(),
		Inbound: []inbound.Sender{{Name: "acme", Queue: "in", Secrets: []string{secret}}}}, nil)
	now := tb.Clock.Now().Unix()
	ts := strconv.FormatInt(now, 10)
	sign := func(id, ts string, body []byte) string {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	body := []byte(`{"type":"payment"}`)
	type req struct {
		name string
		hdr  map[string]string
		body []byte
	}
	cases := []req{
		{"no headers", nil, body},
		{"a bogus access key", map[string]string{"Authorization": "Bearer mq_nope"}, body},
		{"bad signature", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, body},
		{"bad signature and a bogus key", map[string]string{"Authorization": "Bearer mq_nope", "webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, body},
		{"stale", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": strconv.FormatInt(now-3600, 10), "webhook-signature": "v1,AAAA"}, body},
		{"too large", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, bytes.Repeat([]byte("x"), 2<<20)},
		{"empty body", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": "v1,AAAA"}, nil},
	}
	do := func(source string, c req) (int, string, http.Header) {
		r, err := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/inbound/"+source, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data), resp.Header
	}
	for _, c := range cases {
		ks, kb, kh := do("acme", c)
		for _, unknown := range []string{"acm", "nobody", "stripe-live", strings.Repeat("a", 64)} {
			us, ub, uh := do(unknown, c)
			if ks != us || kb != ub {
				t.Errorf("%s: acme %d %q, %s %d %q", c.name, ks, kb, unknown, us, ub)
			}
			for h := range kh {
				if h == "Date" {
					continue
				}
				if kh.Get(h) != uh.Get(h) {
					t.Errorf("%s: header %s: acme %q, %s %q", c.name, h, kh.Get(h), unknown, uh.Get(h))
				}
			}
			if len(kh) != len(uh) {
				t.Errorf("%s: headers of acme %v, of %s %v", c.name, kh, unknown, uh)
			}
		}
		if ks/100 != 4 {
			t.Errorf("%s: %d, want a 4xx", c.name, ks)
		}
	}
	// The control: a request signed with the secret is taken.
	r, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/inbound/acme", bytes.NewReader(body))
	r.Header.Set("webhook-id", "msg_ok")
	r.Header.Set("webhook-timestamp", ts)
	r.Header.Set("webhook-signature", sign("msg_ok", ts, body))
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a signed request: %d, want 200", resp.StatusCode)
	}
}
