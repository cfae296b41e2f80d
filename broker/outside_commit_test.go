package broker_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of POST /v1/commit, from the reference alone: raw
// JSON over HTTP, the deliveries claimed through the receive route. One
// delivery moves onward once, whether the request is sent again without a
// key (at once, concurrently: a client that retries on a timeout while the
// first try still runs), under a fresh key each time, as a reject, or with
// its locks in another order.

type outsideLock struct {
	Queue string `json:"queue"`
	Seq   int64  `json:"seq"`
	Token string `json:"token"`
}

// claimHTTP sends n messages to "q" and claims them through the receive
// route, returning their locks.
func (f *fixture) claimHTTP(t *testing.T, n int) []outsideLock {
	t.Helper()
	for range n {
		if st := f.call(t, "POST", "/v1/queues/q/messages", f.keys["producer"], `{"body":"eA=="}`, nil); st/100 != 2 {
			t.Fatalf("send: %d", st)
		}
	}
	var out struct {
		Messages []struct {
			Queue string `json:"queue"`
			Seq   int64  `json:"seq"`
			Token string `json:"lock_token"`
		} `json:"messages"`
	}
	if st := f.call(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], fmt.Sprintf(`{"max":%d}`, n), &out); st != 200 || len(out.Messages) != n {
		t.Fatalf("receive: %d, %d messages, want %d", st, len(out.Messages), n)
	}
	locks := make([]outsideLock, n)
	for i, m := range out.Messages {
		locks[i] = outsideLock{m.Queue, m.Seq, m.Token}
	}
	return locks
}

func (f *fixture) outCount(t *testing.T) int64 {
	t.Helper()
	var s struct {
		Active int64 `json:"active"`
	}
	if st := f.call(t, "GET", "/v1/queues/out/stats", f.keys["admin"], "", &s); st != 200 {
		t.Fatalf("stats: %d", st)
	}
	return s.Active
}

func commitJSON(t *testing.T, idem, verb string, locks []outsideLock) string {
	t.Helper()
	req := map[string]any{
		verb:   locks,
		"send": []any{map[string]any{"queue": "out", "messages": []any{map[string]any{"body": "b253YXJk"}}}},
	}
	if verb == "reject" {
		rs := make([]map[string]any, len(locks))
		for i, l := range locks {
			rs[i] = map[string]any{"queue": l.Queue, "seq": l.Seq, "token": l.Token, "reason": "bad", "description": "d"}
		}
		req[verb] = rs
	}
	if idem != "" {
		req["idempotency_key"] = idem
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOutsideCommitConcurrentRetriesWithoutKey(t *testing.T) {
	for _, verb := range []string{"complete", "reject"} {
		t.Run(verb, func(t *testing.T) {
			f := start(t, broker.Config{})
			f.tb.Queue(t, "out", mqlite.QueueOptions{})
			locks := f.claimHTTP(t, 1)
			body := commitJSON(t, "", verb, locks)
			var wg sync.WaitGroup
			status := make([]int, 10)
			replayed := make([]bool, 10)
			for i := range 10 {
				wg.Go(func() {
					resp := f.send(t, "POST", "/v1/commit", f.keys["worker"], []byte(body))
					defer resp.Body.Close()
					data, _ := io.ReadAll(resp.Body)
					var out struct {
						Replayed bool `json:"replayed"`
					}
					_ = json.Unmarshal(data, &out)
					status[i], replayed[i] = resp.StatusCode, out.Replayed
				})
			}
			wg.Wait()
			fresh := 0
			for i := range 10 {
				if status[i] != 200 {
					t.Errorf("request %d: %d, want 200 (the first or its replay)", i, status[i])
				}
				if status[i] == 200 && !replayed[i] {
					fresh++
				}
			}
			if fresh != 1 {
				t.Errorf("%d answers not replayed, want 1", fresh)
			}
			if n := f.outCount(t); n != 1 {
				t.Fatalf("out holds %d onward messages after ten identical concurrent commits, want 1", n)
			}
		})
	}
}

func TestOutsideCommitFreshKeysAndOrder(t *testing.T) {
	f := start(t, broker.Config{})
	f.tb.Queue(t, "out", mqlite.QueueOptions{})
	locks := f.claimHTTP(t, 2)
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], commitJSON(t, "", "complete", locks), nil); st != 200 {
		t.Fatalf("first commit: %d", st)
	}
	// The same locks in the other order, without a key: the same derived
	// key; the reference leaves open whether that is the same request (a
	// replay) or the same locks with other items (already settled), but
	// either way nothing commits again.
	swapped := []outsideLock{locks[1], locks[0]}
	resp := f.send(t, "POST", "/v1/commit", f.keys["worker"], []byte(commitJSON(t, "", "complete", swapped)))
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Replayed bool `json:"replayed"`
		Error    struct {
			Reason string `json:"reason"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &out)
	if !(resp.StatusCode == 200 && out.Replayed) && !(resp.StatusCode == 409 && out.Error.Reason == "already_settled") {
		t.Errorf("locks in another order: %d %s, want a replay or 409 already_settled", resp.StatusCode, data)
	}
	t.Logf("locks in another order: %d %s", resp.StatusCode, data)
	for i := range 10 {
		st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(commitJSON(t, fmt.Sprint("fresh-", i), "complete", locks)))
		if st != 409 || e.Reason != "already_settled" {
			t.Errorf("fresh key %d: %d %+v, want 409 already_settled", i, st, e)
		}
	}
	// One lock settled, one not: the whole request fails, nothing sent.
	more := f.claimHTTP(t, 1)
	mixed := []outsideLock{more[0], locks[0]}
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(commitJSON(t, "", "complete", mixed))); st != 409 {
		t.Errorf("a request with one settled lock: %d %+v, want 409", st, e)
	}
	if n := f.outCount(t); n != 1 {
		t.Fatalf("out holds %d onward messages, want 1", n)
	}
	// The unsettled lock of the failed request still completes.
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], commitJSON(t, "", "complete", more), nil); st != 200 {
		t.Fatalf("the other lock alone: %d", st)
	}
	if n := f.outCount(t); n != 2 {
		t.Fatalf("out holds %d onward messages, want 2", n)
	}
}

// One request that settles the same delivery twice (complete twice, or
// complete and reject) fails whole; the delivery stays the caller's.
func TestOutsideCommitSameLockTwice(t *testing.T) {
	f := start(t, broker.Config{})
	f.tb.Queue(t, "out", mqlite.QueueOptions{})
	locks := f.claimHTTP(t, 1)
	l := locks[0]
	twice := commitJSON(t, "", "complete", []outsideLock{l, l})
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(twice)); st/100 != 4 {
		t.Errorf("complete twice in one request: %d %+v, want a 4xx", st, e)
	}
	both := fmt.Sprintf(`{"complete":[{"queue":%q,"seq":%d,"token":%q}],"reject":[{"queue":%q,"seq":%d,"token":%q,"reason":"r","description":"d"}],"send":[{"queue":"out","messages":[{"body":"eA=="}]}]}`,
		l.Queue, l.Seq, l.Token, l.Queue, l.Seq, l.Token)
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(both)); st/100 != 4 {
		t.Errorf("complete and reject in one request: %d %+v, want a 4xx", st, e)
	}
	if n := f.outCount(t); n != 0 {
		t.Fatalf("out holds %d messages after refused requests, want 0", n)
	}
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], commitJSON(t, "", "complete", locks), nil); st != 200 {
		t.Fatalf("the delivery alone afterwards: %d, want 200", st)
	}
	if n := f.outCount(t); n != 1 {
		t.Fatalf("out holds %d messages, want 1", n)
	}
}

// A key over topic "t" and its subscription "mine" commits to the topic;
// "theirs" subscribes too. No answer names "theirs" or gives a seq of it:
// a new message, its duplicate, a message that is new in "mine" but a
// duplicate in "theirs", and a conflict in "theirs" alone.
func TestOutsideCommitTopicHidesTheirs(t *testing.T) {
	f := start(t, broker.Config{})
	f.subscribe(t, "mine", "theirs")
	for i := range 9 { // theirs's seqs grow apart from mine's
		if _, err := outbox.Send(ctx, f.tb.Store, "theirs", outbox.Message{Body: []byte("A"), MessageID: fmt.Sprint("pre-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	scoped, _ := f.key(t, keys.Producer, "t", "mine")
	commit := func(id, body string) (int, string) {
		resp := f.send(t, "POST", "/v1/commit", scoped, []byte(fmt.Sprintf(`{"send":[{"queue":"t","messages":[{"body":%q,"subject":"s","message_id":%q}]}]}`,
			base64.StdEncoding.EncodeToString([]byte(body)), id)))
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	check := func(what string, st int, answer string, wantStatus int) {
		t.Helper()
		t.Logf("%s: %d %s", what, st, answer)
		if st != wantStatus {
			t.Errorf("%s: %d, want %d", what, st, wantStatus)
		}
		if strings.Contains(answer, "theirs") {
			t.Errorf("%s: the answer names theirs: %s", what, answer)
		}
		var out struct {
			Sends []struct {
				Results []struct {
					Seq    int64 `json:"seq"`
					Copies []struct {
						Queue string `json:"queue"`
						Seq   int64  `json:"seq"`
					} `json:"copies"`
				} `json:"results"`
			} `json:"sends"`
		}
		_ = json.Unmarshal([]byte(answer), &out)
		for _, s := range out.Sends {
			for _, r := range s.Results {
				for _, c := range r.Copies {
					if c.Queue != "mine" {
						t.Errorf("%s: a copy in %q", what, c.Queue)
					}
				}
			}
		}
	}
	st, a := commit("new-1", "B")
	check("a new message", st, a, 200)
	st, a = commit("new-1", "B")
	check("its duplicate", st, a, 200)
	st, a = commit("pre-8", "A")
	check("new in mine, a duplicate in theirs", st, a, 200)
	if strings.Contains(a, `"seq":9`) {
		t.Errorf("new in mine, a duplicate in theirs: the answer gives theirs's seq 9: %s", a)
	}
	st, a = commit("pre-7", "other")
	check("a conflict in theirs", st, a, 409)
	if strings.Contains(a, "seq") {
		t.Errorf("a conflict in theirs: the answer gives a seq: %s", a)
	}
}

// A keyed commit that wrote nothing (its one message a duplicate), or that
// failed, keeps no record: the same key afterwards with other items is a
// new request, not an attempt conflict nor a replay.
func TestOutsideCommitNoRecordForNothing(t *testing.T) {
	f := start(t, broker.Config{})
	f.tb.Queue(t, "out", mqlite.QueueOptions{})
	send := func(idem, id, body string) (int, string) {
		resp := f.send(t, "POST", "/v1/commit", f.keys["worker"], []byte(fmt.Sprintf(`{"idempotency_key":%q,"send":[{"queue":"out","messages":[{"body":%q,"message_id":%q}]}]}`,
			idem, base64.StdEncoding.EncodeToString([]byte(body)), id)))
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if st, a := send("k1", "m", "A"); st != 200 {
		t.Fatalf("first: %d %s", st, a)
	}
	if st, a := send("k2", "m", "A"); st != 200 || !strings.Contains(a, `"duplicate":true`) {
		t.Fatalf("a duplicate under a new key: %d %s, want 200 duplicate", st, a)
	}
	if st, a := send("k2", "n", "B"); st != 200 || strings.Contains(a, "replayed") {
		t.Errorf("the key of a commit that wrote nothing, with other items: %d %s, want a new commit", st, a)
	}
	if st, a := send("k3", "m", "conflict"); st != 409 {
		t.Fatalf("a conflict: %d %s, want 409", st, a)
	}
	if st, a := send("k3", "o", "C"); st != 200 || strings.Contains(a, "replayed") {
		t.Errorf("the key of a failed commit, with other items: %d %s, want a new commit", st, a)
	}
	// The control: a key that wrote something replays, and conflicts with
	// other items.
	if st, a := send("k1", "m", "A"); st != 200 || !strings.Contains(a, `"replayed":true`) {
		t.Errorf("k1 again: %d %s, want a replay", st, a)
	}
	if st, a := send("k1", "p", "D"); st != 409 {
		t.Errorf("k1 with other items: %d %s, want 409", st, a)
	}
	if n := f.outCount(t); n != 3 {
		t.Fatalf("out holds %d messages, want 3 (m, n, o)", n)
	}
}
