package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/brokertest"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

var ctx = context.Background()

type fixture struct {
	tb   *testdb.Bundle
	url  string
	log  *testdb.Buffer
	keys map[string]string // name → secret
	ids  map[string]string // name → key id
}

// start runs a broker with a debug log captured, queue "q" and topic "t",
// and keys of every role (over "*"), an admin over "other" only, and a
// revoked admin.
func start(t *testing.T, cfg broker.Config) *fixture {
	t.Helper()
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	if err := tb.Store.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	f := &fixture{tb: tb, log: &testdb.Buffer{}, keys: map[string]string{}, ids: map[string]string{}}
	for name, sc := range map[string]keys.Scope{
		"admin":    {Role: keys.Admin, Queues: []string{"*"}},
		"producer": {Role: keys.Producer, Queues: []string{"*"}},
		"consumer": {Role: keys.Consumer, Queues: []string{"*"}},
		"worker":   {Role: keys.Worker, Queues: []string{"*"}},
		"other":    {Role: keys.Admin, Queues: []string{"other"}},
		"revoked":  {Role: keys.Admin, Queues: []string{"*"}},
	} {
		k, secret, err := keys.Create(ctx, tb.Store, sc)
		if err != nil {
			t.Fatal(err)
		}
		f.keys[name], f.ids[name] = secret, k.ID
	}
	if err := keys.Revoke(ctx, tb.Store, f.ids["revoked"]); err != nil {
		t.Fatal(err)
	}
	cfg.Store = tb.Store
	cfg.Logger = slog.New(slog.NewJSONHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.url = serve(t, cfg, nil)
	return f
}

// serve runs a broker with cfg on httptest, its handler wrapped by wrap
// when not nil, shuts it down when the test ends, and returns its URL.
func serve(t *testing.T, cfg broker.Config, wrap func(http.Handler) http.Handler) string {
	return brokertest.Serve(t, cfg, wrap)
}

// do sends one request and returns the status and the decoded error body.
func (f *fixture) do(t *testing.T, method, path, key string, body []byte) (int, wire.Error) {
	t.Helper()
	resp := f.send(t, method, path, key, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var er wire.ErrorResponse
	_ = json.Unmarshal(data, &er)
	return resp.StatusCode, er.Error
}

// send sends one request with key ("" for none) and body (nil for none);
// the caller closes the response body.
func (f *fixture) send(t *testing.T, method, path, key string, body []byte) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// route is one endpoint with a valid body, the role that may call it, and
// what a key over another queue gets.
type route struct {
	method, path, body string
	role               keys.Role
	otherQueue         int // status for an admin key over "other" only
}

var routes = []route{
	{"POST", "/v1/queues/q/messages", `{"body":"eA=="}`, keys.Producer, 403},
	{"POST", "/v1/queues/q/messages/batch", `{"messages":[{"body":"eA=="}]}`, keys.Producer, 403},
	{"GET", "/v1/queues/q/messages", ``, keys.Consumer, 403},
	{"GET", "/v1/queues/q/find?subject_prefix=a", ``, keys.Consumer, 403},
	{"POST", "/v1/queues/q/receive", `{"max":1}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/complete", `{"seq":1,"token":"t"}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/complete-batch", `{"locks":[{"seq":1,"token":"t"}]}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/abandon", `{"seq":1,"token":"t","delay_ms":5}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/release", `{"seq":1,"token":"t"}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/reject", `{"seq":1,"token":"t","reason":"r"}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/defer", `{"seq":1,"token":"t"}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/receive-deferred", `{"seq":1}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/renew", `{"seq":1,"token":"t"}`, keys.Consumer, 403},
	{"POST", "/v1/queues/q/renew-batch", `{"locks":[{"seq":1,"token":"t"}]}`, keys.Consumer, 403},
	{"GET", "/v1/queues/q/stats", ``, keys.Consumer, 403},
	{"GET", "/v1/queues/q/dead-letters", ``, keys.Admin, 403},
	{"POST", "/v1/queues/q/dead-letters/redrive", `{}`, keys.Admin, 403},
	{"POST", "/v1/queues/q/purge", `{"state":"active"}`, keys.Admin, 403},
	{"POST", "/v1/queues/q/deliver-now", `{"seqs":[1]}`, keys.Admin, 403},
	{"GET", "/v1/queues", ``, keys.Admin, 200},
	{"POST", "/v1/queues", `{"name":"q2"}`, keys.Admin, 403},
	{"GET", "/v1/queues/q", ``, keys.Admin, 403},
	{"PUT", "/v1/queues/q", `{"options":{}}`, keys.Admin, 403},
	{"POST", "/v1/queues/q/pause", ``, keys.Admin, 403},
	{"POST", "/v1/queues/q/resume", ``, keys.Admin, 403},
	{"DELETE", "/v1/queues/q", ``, keys.Admin, 403},
	{"GET", "/v1/topics", ``, keys.Admin, 200},
	{"POST", "/v1/topics", `{"name":"t2"}`, keys.Admin, 403},
	{"GET", "/v1/topics/t", ``, keys.Admin, 403},
	{"DELETE", "/v1/topics/t", ``, keys.Admin, 403},
	{"POST", "/v1/topics/t/subscriptions", `{"queue":"s1"}`, keys.Admin, 403},
	{"PUT", "/v1/topics/t/subscriptions/s1", `{"filter":{}}`, keys.Admin, 403},
	{"DELETE", "/v1/topics/t/subscriptions/s1", ``, keys.Admin, 403},
	{"GET", "/v1/keys", ``, keys.Admin, 403},
	{"POST", "/v1/keys", `{"role":"consumer","queues":["q"]}`, keys.Admin, 403},
	{"DELETE", "/v1/keys/0000000000000000", ``, keys.Admin, 403},
	{"POST", "/v1/backup", `{"path":"/nonexistent/dir/b.db"}`, keys.Admin, 403},
	{"GET", "/metrics", ``, keys.Admin, 403},
	{"GET", "/v1/counts", ``, keys.Consumer, 200},
	{"GET", "/v1/schedules", ``, keys.Admin, 200},
	{"POST", "/v1/commit", `{"complete":[{"queue":"q","seq":1,"token":"t"}]}`, keys.Consumer, 403},
}

// wrongRole is a key whose role does not include r.
func wrongRole(r keys.Role) string {
	if r == keys.Producer {
		return "consumer"
	}
	return "producer"
}

// TestEveryEndpointChecksTheKey: every endpoint refuses no key, a garbled
// key and a revoked key with 401, a key of the wrong role and a key of
// another queue with 403, and lets the right key through.
func TestEveryEndpointChecksTheKey(t *testing.T) {
	f := start(t, broker.Config{BackupDir: t.TempDir()})
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			body := []byte(r.body)
			if r.body == "" {
				body = nil
			}
			for _, c := range []struct {
				name, key, reason string
				status            int
			}{
				{"no key", "", wire.ReasonNoKey, 401},
				{"garbled key", "mqlite_nope", wire.ReasonBadKey, 401},
				{"unknown key", "mqlite_0000000000000000_" + strings.Repeat("A", 43), wire.ReasonBadKey, 401},
				{"revoked key", f.keys["revoked"], wire.ReasonBadKey, 401},
				{"wrong role", f.keys[wrongRole(r.role)], wire.ReasonRole, 403},
				{"wrong queue", f.keys["other"], wire.ReasonQueue, r.otherQueue},
			} {
				if r.role == keys.Admin && c.name == "wrong role" {
					// Admin endpoints: neither producer, consumer nor worker passes.
					for _, k := range []string{"producer", "consumer", "worker"} {
						if st, e := f.do(t, r.method, r.path, f.keys[k], body); st != 403 || e.Reason != wire.ReasonRole {
							t.Errorf("%s key: %d %+v, want 403 %s", k, st, e, wire.ReasonRole)
						}
					}
					continue
				}
				st, e := f.do(t, r.method, r.path, c.key, body)
				if st != c.status || (c.status >= 400 && e.Reason != c.reason) {
					t.Errorf("%s: %d %+v, want %d %s", c.name, st, e, c.status, c.reason)
				}
			}
			// The right key gets past authorisation (whatever the store then says).
			if st, e := f.do(t, r.method, r.path, f.keys["admin"], body); st == 401 || st == 403 {
				t.Errorf("admin key: %d %+v", st, e)
			}
		})
	}
	log := f.log.String()
	if !strings.Contains(log, f.ids["admin"]) {
		t.Fatalf("the request log does not name the key id; log:\n%.2000s", log)
	}
	for name, secret := range f.keys {
		if strings.Contains(log, secret) || strings.Contains(log, secret[len(secret)-43:]) {
			t.Errorf("the %s key's secret is in the log", name)
		}
	}
}

// TestBadBodies: every endpoint with a body refuses malformed JSON, unknown
// fields, trailing data and an empty body with 400, and a body over the
// limit with 413; a batch over the limit is 413 too.
func TestBadBodies(t *testing.T) {
	f := start(t, broker.Config{MaxBodyBytes: 4096, MaxBatch: 2})
	admin := f.keys["admin"]
	for _, r := range routes {
		if r.body == "" {
			continue
		}
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			for _, c := range []struct {
				name, body, reason string
				status             int
			}{
				{"malformed", `{"seq":`, wire.ReasonMalformed, 400},
				{"not an object", `[1,2]`, wire.ReasonMalformed, 400},
				{"unknown field", `{"bogus":1}`, wire.ReasonMalformed, 400},
				{"trailing data", r.body + `{}`, wire.ReasonMalformed, 400},
				{"empty", ``, wire.ReasonMalformed, 400},
				{"null", `null`, wire.ReasonMalformed, 400},
				{"null with spaces", " null\n", wire.ReasonMalformed, 400},
				{"a string", `"x"`, wire.ReasonMalformed, 400},
				{"oversized", `{"x":"` + strings.Repeat("a", 8192) + `"}`, wire.ReasonBodyTooLarge, 413},
			} {
				st, e := f.do(t, r.method, r.path, admin, []byte(c.body))
				if st != c.status || e.Reason != c.reason || e.Code == "" {
					t.Errorf("%s: %d %+v, want %d %s", c.name, st, e, c.status, c.reason)
				}
			}
		})
	}
	st, e := f.do(t, "POST", "/v1/queues/q/messages/batch", admin, []byte(`{"messages":[{},{},{}]}`))
	if st != 413 || e.Reason != wire.ReasonBatchTooLarge {
		t.Errorf("batch of 3 over 2: %d %+v", st, e)
	}
	st, e = f.do(t, "POST", "/v1/queues/q/complete-batch", admin, []byte(`{"locks":[{},{},{}]}`))
	if st != 413 || e.Reason != wire.ReasonBatchTooLarge {
		t.Errorf("locks 3 over 2: %d %+v", st, e)
	}
}

// TestErrorStatuses pins the status and code of each kind of store error.
func TestErrorStatuses(t *testing.T) {
	f := start(t, broker.Config{})
	admin := f.keys["admin"]
	if st, _ := f.do(t, "POST", "/v1/queues/q/messages", admin, []byte(`{"body":"eA==","message_id":"a"}`)); st != 201 {
		t.Fatalf("send: %d", st)
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, reason             string
	}{
		{"lock lost", "POST", "/v1/queues/q/complete", `{"seq":1,"token":"00000000000000000000000000000000"}`, 409, wire.CodeLockLost, "lock_lost"},
		{"queue not found", "POST", "/v1/queues/nope/receive", `{}`, 404, wire.CodeNotFound, "queue_not_found"},
		{"topic not found", "GET", "/v1/topics/nope", ``, 404, wire.CodeNotFound, "topic_not_found"},
		{"message not found", "POST", "/v1/queues/q/receive-deferred", `{"seq":1}`, 404, wire.CodeNotFound, "message_not_found"},
		{"duplicate conflict", "POST", "/v1/queues/q/messages", `{"body":"eQ==","message_id":"a"}`, 409, wire.CodeConflict, "duplicate_conflict"},
		{"queue exists", "POST", "/v1/queues", `{"name":"q"}`, 409, wire.CodeConflict, "queue_exists"},
		{"invalid lock duration", "POST", "/v1/queues", `{"name":"z","options":{"lock_duration_ms":1}}`, 400, wire.CodeInvalid, "invalid_lock_duration"},
		{"invalid ordering", "POST", "/v1/queues", `{"name":"z","options":{"ordering":"lifo"}}`, 400, wire.CodeInvalid, "invalid_ordering"},
		{"invalid mode", "POST", "/v1/queues/q/receive", `{"mode":"x"}`, 400, wire.CodeInvalid, "invalid_argument"},
		{"too large", "POST", "/v1/queues/q/messages", `{"body":"` + strings.Repeat("A", 1<<21) + `"}`, 413, wire.CodeTooLarge, "message_too_large"},
		{"no route", "GET", "/v1/nothing", ``, 404, wire.CodeNotFound, wire.ReasonNoRoute},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			st, e := f.do(t, c.method, c.path, admin, body)
			if st != c.status || e.Code != c.code || e.Reason != c.reason {
				t.Errorf("%d %+v, want %d %s %s", st, e, c.status, c.code, c.reason)
			}
		})
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if st, _ := f.do(t, "GET", p, "", nil); st != 200 {
			t.Errorf("%s: %d", p, st)
		}
	}
}
