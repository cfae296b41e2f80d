package broker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

// jobsFixture is start's fixture with a queue "jobs" whose dedup window
// holds an hour.
func jobsFixture(t *testing.T) *fixture {
	t.Helper()
	f := start(t, broker.Config{})
	f.tb.Queue(t, "jobs", mqlite.QueueOptions{DedupWindow: time.Hour})
	return f
}

const jobsQuery = `SELECT count(*) FROM mqlite_messages WHERE queue = 'jobs'`

// TestCommitJobsUnique: a unique job inserted through the commit route is
// inserted once; the same job again answers the first's id as a
// duplicate, and writes nothing. The job's message is the one jobs.Insert
// writes: its kind as a property, its key as its message id.
func TestCommitJobsUnique(t *testing.T) {
	f := jobsFixture(t)
	body := `{"jobs":[{"queue":"jobs","kind":"mail","args":{"to":"ada"},"unique":{"by_args":true}}]}`
	var first, again wire.CommitResponse
	if st := f.call(t, "POST", "/v1/commit", f.keys["producer"], body, &first); st != 200 || len(first.Jobs) != 1 || first.Jobs[0].Duplicate {
		t.Fatalf("first insert: %d %+v, want the job inserted", st, first)
	}
	if st := f.call(t, "POST", "/v1/commit", f.keys["producer"], body, &again); st != 200 || len(again.Jobs) != 1 ||
		!again.Jobs[0].Duplicate || again.Jobs[0].ID != first.Jobs[0].ID {
		t.Fatalf("the same job again: %d %+v, want job %d, a duplicate", st, again, first.Jobs[0].ID)
	}
	if n := f.rows(t, jobsQuery); n != 1 {
		t.Fatalf("jobs holds %d messages, want 1", n)
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'jobs' AND message_id LIKE 'job/mail/%' AND properties LIKE '%"mqlite-job-kind":"mail"%'`); n != 1 {
		t.Fatalf("%d jobs with the kind's key and property, want 1", n)
	}
}

// TestCommitJobsScope: a key that does not cover a job's queue, or lacks
// the producer role on it, is refused before anything is read, with the
// same answer whether the queue exists or not; nothing is inserted.
func TestCommitJobsScope(t *testing.T) {
	f := jobsFixture(t)
	body := func(q string) []byte {
		return []byte(`{"jobs":[{"queue":"` + q + `","kind":"mail","args":{},"unique":{"by_args":true}}]}`)
	}
	stQ, eQ := f.do(t, "POST", "/v1/commit", f.keys["other"], body("jobs"))
	stN, eN := f.do(t, "POST", "/v1/commit", f.keys["other"], body("nope"))
	eN.Message = strings.ReplaceAll(eN.Message, `"nope"`, `"jobs"`)
	if stQ != 403 || eQ.Reason != wire.ReasonQueue || stQ != stN || eQ != eN {
		t.Errorf("a key not covering the queue: existing %d %+v, missing %d %+v; want the same 403", stQ, eQ, stN, eN)
	}
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["consumer"], body("jobs")); st != 403 || e.Reason != wire.ReasonRole {
		t.Errorf("a consumer key: %d %+v, want 403 %s", st, e, wire.ReasonRole)
	}
	// One covered job and one not: refused whole.
	scoped, _ := f.key(t, keys.Producer, "jobs")
	two := `{"jobs":[{"queue":"jobs","kind":"mail","args":{}},{"queue":"q","kind":"mail","args":{}}]}`
	if st, e := f.do(t, "POST", "/v1/commit", scoped, []byte(two)); st != 403 || e.Reason != wire.ReasonQueue {
		t.Errorf("a second job outside the scope: %d %+v, want 403", st, e)
	}
	// A carried send needs the producer role on its queue as well as the
	// consumer role its completion needs.
	carry := `{"complete":[{"queue":"jobs","seq":1,"token":"t"}],"carry":[{"queue":"jobs","from_seq":1,"message":{"body":"e30=","message_id":"job/x"}}]}`
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["consumer"], []byte(carry)); st != 403 || e.Reason != wire.ReasonRole {
		t.Errorf("a carried send with a consumer key: %d %+v, want 403 %s", st, e, wire.ReasonRole)
	}
	if n := f.rows(t, jobsQuery) + f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q'`); n != 0 {
		t.Fatalf("%d messages inserted by refused requests, want none", n)
	}
}

// TestCommitJobsBadInput: jobs the job layer would refuse are refused
// with its typed reasons (400), before the store is read; a carried send
// not from a delivery the request completes, or without a message id, is
// malformed. Nothing is inserted.
func TestCommitJobsBadInput(t *testing.T) {
	f := jobsFixture(t)
	f.tb.Queue(t, "nodedup", mqlite.QueueOptions{DedupWindow: -1})
	keysList := make([]string, 65)
	for i := range keysList {
		keysList[i] = fmt.Sprintf("%q", fmt.Sprint("k", i))
	}
	for _, tc := range []struct{ job, reason string }{
		{`{"queue":"jobs","kind":"","args":{}}`, "invalid_job_kind"},
		{`{"queue":"jobs","kind":"` + strings.Repeat("k", 129) + `","args":{}}`, "invalid_job_kind"},
		{`{"queue":"jobs","kind":"mail"}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":{},"max_attempts":-1}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":{},"unique":{"by_period_ms":-1}}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":{},"unique":{"arg_keys":[` + strings.Join(keysList, ",") + `]}}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":{},"unique":{"arg_keys":["` + strings.Repeat("k", 257) + `"]}}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":[1],"unique":{"arg_keys":["to"]}}`, "invalid_argument"},
		{`{"queue":"jobs","kind":"mail","args":{},"unique":{"by_period_ms":7200000}}`, "unique_window"},
		{`{"queue":"nodedup","kind":"mail","args":{},"unique":{"by_args":true}}`, "unique_window"},
		{`{"queue":"","kind":"mail","args":{}}`, "invalid_queue_name"},
		{`{"queue":"nope","kind":"mail","args":{}}`, "queue_not_found"},
		{`{"queue":"jobs","kind":"mail","args":{},"priority":99}`, "invalid_message"},
	} {
		st, e := f.do(t, "POST", "/v1/commit", f.keys["admin"], []byte(`{"jobs":[`+tc.job+`]}`))
		if e.Reason != tc.reason || st != wire.Status(e.Code) || st < 400 {
			t.Errorf("%.120s: %d %+v, want %s", tc.job, st, e, tc.reason)
		}
	}
	for _, body := range []string{
		`{"carry":[{"queue":"jobs","from_seq":1,"message":{"body":"e30=","message_id":"job/x"}}]}`,
		`{"complete":[{"queue":"jobs","seq":2,"token":"t"}],"carry":[{"queue":"jobs","from_seq":1,"message":{"body":"e30=","message_id":"job/x"}}]}`,
		`{"complete":[{"queue":"jobs","seq":1,"token":"t"}],"carry":[{"queue":"jobs","from_seq":1,"message":{"body":"e30="}}]}`,
	} {
		if st, e := f.do(t, "POST", "/v1/commit", f.keys["admin"], []byte(body)); st != 400 || e.Reason != wire.ReasonMalformed {
			t.Errorf("%s: %d %+v, want 400 %s", body, st, e, wire.ReasonMalformed)
		}
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages`); n != 0 {
		t.Fatalf("%d messages after bad requests, want none", n)
	}
}

// TestCommitJobsBatchBound: jobs count against the batch bound with the
// request's other items, refused before anything is read.
func TestCommitJobsBatchBound(t *testing.T) {
	f := start(t, broker.Config{MaxBatch: 2})
	var req wire.CommitRequest
	for range 3 {
		req.Jobs = append(req.Jobs, wire.CommitJob{Queue: "q", Kind: "mail", Args: json.RawMessage(`{}`)})
	}
	b, _ := json.Marshal(req)
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["admin"], b); st != 413 || e.Reason != wire.ReasonBatchTooLarge {
		t.Fatalf("three jobs past a bound of two: %d %+v, want 413 %s", st, e, wire.ReasonBatchTooLarge)
	}
}

// FuzzCommitJobs sends arbitrary commit bodies with jobs and carried sends
// to the broker, under a key producing to "jobs" alone: it never panics
// nor answers 5xx; an error has a code; an answer has one result per job;
// nothing lands outside "jobs"; a refused request stores nothing; and a
// unique job sent again is answered with the same id.
func FuzzCommitJobs(f *testing.F) {
	f.Add(`{"jobs":[{"queue":"jobs","kind":"mail","args":{"to":"ada"},"unique":{"by_args":true}}]}`)
	f.Add(`{"jobs":[{"queue":"jobs","kind":"mail","args":{"a":1,"b":[2]},"unique":{"arg_keys":["a","c"],"by_period_ms":1000}}]}`)
	f.Add(`{"jobs":[{"queue":"q","kind":"mail","args":{}}]}`)
	f.Add(`{"jobs":[{"queue":"jobs","kind":"","args":null,"max_attempts":-3,"priority":10,"scheduled_at":"2020-01-01T00:00:00Z"}]}`)
	f.Add(`{"complete":[{"queue":"jobs","seq":1,"token":"t"}],"carry":[{"queue":"jobs","from_seq":1,"message":{"body":"e30=","message_id":"job/x"}}]}`)
	f.Add(`{"jobs":[{"queue":"jobs","kind":"k","args":{},"unique":{"by_period_ms":-1,"arg_keys":[""]}}],"idempotency_key":"i"}`)
	tb := testdb.Open(f, mqlite.Config{})
	tb.Queue(f, "jobs", mqlite.QueueOptions{DedupWindow: time.Hour})
	tb.Queue(f, "q", mqlite.QueueOptions{})
	_, secret, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Worker, Queues: []string{"jobs"}})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := broker.New(broker.Config{Store: tb.Store, MaxBatch: 8})
	if err != nil {
		f.Fatal(err)
	}
	post := func(t *testing.T, body string) (int, wire.CommitResponse, wire.Error) {
		req := httptest.NewRequest(http.MethodPost, "/v1/commit", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		var out wire.CommitResponse
		var eb wire.ErrorResponse
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("200 with %q: %v", rec.Body, err)
			}
		} else if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Reason == "" {
			t.Fatalf("%d without an error code: %q", rec.Code, rec.Body)
		}
		return rec.Code, out, eb.Error
	}
	count := func(t *testing.T, where string) int64 {
		return testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE `+where)
	}
	f.Fuzz(func(t *testing.T, body string) {
		before := count(t, "1")
		st, out, e := post(t, body)
		if st >= 500 {
			t.Fatalf("%q: %d %+v", body, st, e)
		}
		if n := count(t, "queue <> 'jobs'"); n != 0 {
			t.Fatalf("%q: %d messages outside the key's queue", body, n)
		}
		if st != http.StatusOK {
			if after := count(t, "1"); after != before {
				t.Fatalf("%q: refused (%d %+v) but stored %d messages", body, st, e, after-before)
			}
			return
		}
		var req wire.CommitRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("%q: answered 200 to a body that does not decode: %v", body, err)
		}
		if len(out.Jobs) != len(req.Jobs) {
			t.Fatalf("%q: %d results for %d jobs", body, len(out.Jobs), len(req.Jobs))
		}
		if len(req.Jobs) == 0 || len(req.Complete)+len(req.Reject)+len(req.Send)+len(req.Carry) > 0 {
			return
		}
		st2, again, e2 := post(t, body)
		if st2 != http.StatusOK {
			t.Fatalf("%q again: %d %+v, want 200", body, st2, e2)
		}
		for i, j := range req.Jobs {
			if j.Unique != nil && again.Jobs[i].ID != out.Jobs[i].ID {
				t.Fatalf("%q again: unique job %d answered id %d, the first time %d", body, i, again.Jobs[i].ID, out.Jobs[i].ID)
			}
		}
	})
}
