package broker_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/buildinfo"
	"github.com/mqlite/mqlite/internal/wire"
)

// get sends GET path with key and decodes a 200 response into out.
func (f *fixture) get(t *testing.T, path, key string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", f.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// TestDashboardAssets: the dashboard's files are served without a key, with
// the security headers, and index.html has no inline script (the CSP would
// refuse it anyway).
func TestDashboardAssets(t *testing.T) {
	f := start(t, broker.Config{})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(f.url + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range []struct{ path, ctype string }{
		{"/ui/", "text/html"},
		{"/ui/app.js", "text/javascript"},
		{"/ui/api.js", "text/javascript"},
		{"/ui/chart.js", "text/javascript"},
		{"/ui/style.css", "text/css"},
	} {
		resp, err := http.Get(f.url + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || !strings.HasPrefix(h.Get("Content-Type"), c.ctype) {
			t.Errorf("%s: %d %q, want 200 %s", c.path, resp.StatusCode, h.Get("Content-Type"), c.ctype)
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q allows inline or eval", c.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", c.path, h)
		}
		if c.path == "/ui/" && regexp.MustCompile(`<script(\s[^>]*)?>[^<]`).Match(body) {
			t.Errorf("index.html has an inline script")
		}
	}
	if resp, err := http.Get(f.url + "/ui/nope.js"); err != nil || resp.StatusCode != 404 {
		t.Errorf("missing file: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestWhoAmI: every valid key learns its id, role and scope, the queues it
// covers and the broker's version; no key is 401.
func TestWhoAmI(t *testing.T) {
	f := start(t, broker.Config{})
	for _, c := range []struct {
		name, role string
		queues     []string
	}{
		{"admin", "admin", []string{"q"}},
		{"consumer", "consumer", []string{"q"}},
		{"producer", "producer", []string{"q"}},
		{"other", "admin", []string{}},
	} {
		var got wire.WhoAmIResponse
		if st := f.get(t, "/v1/whoami", f.keys[c.name], &got); st != 200 {
			t.Fatalf("%s: %d", c.name, st)
		}
		if got.Key.ID != f.ids[c.name] || got.Key.Role != c.role || strings.Join(got.Queues, ",") != strings.Join(c.queues, ",") ||
			got.Version != buildinfo.Version() {
			t.Errorf("%s: %+v, want role %s queues %v version %s", c.name, got, c.role, c.queues, buildinfo.Version())
		}
	}
	if st, e := f.do(t, "GET", "/v1/whoami", "", nil); st != 401 || e.Reason != wire.ReasonNoKey {
		t.Errorf("no key: %d %+v", st, e)
	}
	if st, e := f.do(t, "GET", "/v1/whoami", f.keys["revoked"], nil); st != 401 || e.Reason != wire.ReasonBadKey {
		t.Errorf("revoked key: %d %+v", st, e)
	}
}
