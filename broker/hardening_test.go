package broker_test

// The broker attacked as an operator's untrusted client would.
// Each test pins one promise through the HTTP API.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// key makes a key of role over queues and returns its secret and id.
func (f *fixture) key(t *testing.T, role keys.Role, queues ...string) (string, string) {
	t.Helper()
	k, secret, err := keys.Create(ctx, f.tb.Store, keys.Scope{Role: role, Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	return secret, k.ID
}

// call sends one request and decodes a 2xx body into out.
func (f *fixture) call(t *testing.T, method, path, key, body string, out any) int {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	resp := f.send(t, method, path, key, b)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

// subscribe subscribes queues to topic "t" through the store, each with an
// exact subject filter named after it.
func (f *fixture) subscribe(t *testing.T, queues ...string) {
	t.Helper()
	for _, q := range queues {
		err := f.tb.Store.CreateSubscription(ctx, "t", q, mqlite.SubscriptionOptions{Filter: mqlite.Filter{SubjectPrefix: "s"}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func subscriptionQueues(tp wire.Topic) []string {
	var out []string
	for _, s := range tp.Subscriptions {
		out = append(out, s.Queue)
	}
	return out
}

// TestTopicAdminNeedsEveryQueueItChanges : an admin key
// over a topic and one of its subscription queues cannot re-filter or
// delete another subscription queue, nor delete the topic while it has
// one the key does not cover; refused calls change nothing.
func TestTopicAdminNeedsEveryQueueItChanges(t *testing.T) {
	f := start(t, broker.Config{})
	f.subscribe(t, "mine", "theirs")
	scoped, _ := f.key(t, keys.Admin, "t", "mine")
	if _, err := outbox.Send(ctx, f.tb.Store, "t", outbox.Message{Body: []byte("x"), Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/topics/t/subscriptions/theirs", `{"filter":{"subject":"nothing"}}`},
		{"DELETE", "/v1/topics/t/subscriptions/theirs", ``},
		{"DELETE", "/v1/topics/t", ``},
	} {
		if st, e := f.do(t, c.method, c.path, scoped, []byte(c.body)); st != 403 || e.Code != wire.CodeForbidden {
			t.Errorf("%s %s: %d %+v, want 403", c.method, c.path, st, e)
		}
	}
	tp, err := f.tb.Store.GetTopic(ctx, "t")
	if err != nil || len(tp.Subscriptions) != 2 || tp.Subscriptions[1].Filter.SubjectPrefix != "s" {
		t.Fatalf("after the refused calls: %+v, %v; want both subscriptions as they were", tp, err)
	}
	if st, err := f.tb.Store.Stats(ctx, "theirs"); err != nil || st.Active != 1 {
		t.Fatalf("theirs after the refused calls: %+v, %v; want its message", st, err)
	}
	// What the key covers, it may change.
	if st, e := f.do(t, "PUT", "/v1/topics/t/subscriptions/mine", scoped, []byte(`{"filter":{"subject":"s1"}}`)); st != 200 {
		t.Errorf("PUT mine: %d %+v", st, e)
	}
	if st, e := f.do(t, "DELETE", "/v1/topics/t/subscriptions/theirs", f.keys["admin"], nil); st != 204 {
		t.Fatalf("admin deletes theirs: %d %+v", st, e)
	}
	if st, e := f.do(t, "DELETE", "/v1/topics/t", scoped, nil); st != 204 {
		t.Errorf("DELETE t once every subscription is covered: %d %+v", st, e)
	}
}

// TestBackupOnlyIntoTheBackupDir : without
// Config.BackupDir remote backups are refused; with it, a request names a
// plain file inside it, written 0600; every other path is refused and
// nothing is written; errors on the wire name no host path.
func TestBackupOnlyIntoTheBackupDir(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		f := start(t, broker.Config{})
		dst := filepath.Join(t.TempDir(), "b.db")
		body := fmt.Appendf(nil, `{"path":%q}`, dst)
		if st, e := f.do(t, "POST", "/v1/backup", f.keys["admin"], body); st != 403 || e.Reason != wire.ReasonBackupDisabled {
			t.Errorf("backup without a backup folder: %d %+v, want 403 %s", st, e, wire.ReasonBackupDisabled)
		}
		if _, err := os.Lstat(dst); err == nil {
			t.Error("the refused backup wrote a file")
		}
	})
	t.Run("on", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "backups")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		f := start(t, broker.Config{BackupDir: dir})
		admin := f.keys["admin"]
		outside := t.TempDir()
		for _, p := range []string{
			filepath.Join(outside, "abs.db"), "../escape.db", "sub/b.db", "", ".", "..", "./x.db", `a\b.db`,
		} {
			st, e := f.do(t, "POST", "/v1/backup", admin, fmt.Appendf(nil, `{"path":%q}`, p))
			if st != 400 || e.Code != wire.CodeInvalid {
				t.Errorf("path %q: %d %+v, want 400", p, st, e)
			}
		}
		if st, e := f.do(t, "POST", "/v1/backup", admin, []byte(`{"path":"b.db"}`)); st != 200 {
			t.Fatalf("backup b.db: %d %+v", st, e)
		}
		fi, err := os.Stat(filepath.Join(dir, "b.db"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the backup: %v, %v; want a file of mode 0600", fi, err)
		}
		st, e := f.do(t, "POST", "/v1/backup", admin, []byte(`{"path":"b.db"}`))
		if st != 409 || e.Reason != "destination_exists" || strings.Contains(e.Message, dir) {
			t.Errorf("backup over b.db: %d %+v, want 409 destination_exists naming no host path", st, e)
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) != 0 || fileExists(filepath.Join(filepath.Dir(dir), "escape.db")) {
			t.Errorf("a refused backup wrote outside the folder: %v", entries)
		}
		// A failure of the host is generic on the wire, and its cause is in
		// the log.
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if os.Geteuid() == 0 {
			return // root writes into a read-only folder
		}
		st, e = f.do(t, "POST", "/v1/backup", admin, []byte(`{"path":"c.db"}`))
		if st != 500 || strings.Contains(e.Message, dir) || strings.Contains(e.Message, "permission") {
			t.Errorf("backup into a read-only folder: %d %+v, want 500 with a generic message", st, e)
		}
		if !strings.Contains(f.log.String(), "permission denied") {
			t.Errorf("the log does not say why the backup failed:\n%.2000s", f.log.String())
		}
	})
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestAnswersStayWithinTheByteBudget : peek, the
// dead-letter listing and receive stop adding messages at
// Config.MaxResponseBytes, and always carry at least one.
func TestAnswersStayWithinTheByteBudget(t *testing.T) {
	const budget, size = 10_000, 4_000
	f := start(t, broker.Config{MaxResponseBytes: budget})
	big := strings.Repeat("b", 3*budget)
	err := f.tb.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		for i := range 5 {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: fmt.Appendf(nil, "%0*d", size, i)}); err != nil {
				return err
			}
		}
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte(big)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	admin := f.keys["admin"]
	var got wire.MessagesResponse
	pages := [][]int{}
	for from := int64(0); ; {
		if st := f.call(t, "GET", fmt.Sprintf("/v1/queues/q/messages?max=100&from_seq=%d", from), admin, "", &got); st != 200 {
			t.Fatalf("peek: %d", st)
		}
		if len(got.Messages) == 0 {
			break
		}
		var page []int
		for _, m := range got.Messages {
			page = append(page, len(m.Body))
			from = m.Seq + 1
		}
		pages = append(pages, page)
	}
	want := [][]int{{size, size}, {size, size}, {size}, {len(big)}}
	if !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("peek pages of body sizes %v, want %v", pages, want)
	}
	for range 2 {
		if st := f.call(t, "POST", "/v1/queues/q/receive", admin, `{"max":10}`, &got); st != 200 || len(got.Messages) != 2 {
			t.Fatalf("receive max 10: %d, %d messages, want 2", st, len(got.Messages))
		}
		for _, m := range got.Messages {
			if err := f.tb.Store.Reject(ctx, mqlite.Lock{Queue: "q", Seq: m.Seq, Token: m.LockToken}, "r", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := f.call(t, "GET", "/v1/queues/q/dead-letters?max=100", admin, "", &got); st != 200 || len(got.Messages) != 2 {
		t.Fatalf("dead letters: %d, %d messages, want 2 of the 4", st, len(got.Messages))
	}
	if st := f.call(t, "POST", "/v1/queues/q/receive", admin, `{"max":10,"max_bytes":1}`, &got); st != 200 || len(got.Messages) != 1 {
		t.Fatalf("receive max_bytes 1: %d, %d messages, want 1 (always one)", st, len(got.Messages))
	}
	// A schedule carries its message's body: the listing comes in pages.
	for _, name := range []string{"a", "b", "c"} {
		err := f.tb.Store.CreateSchedule(ctx, name, mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Body: make([]byte, size)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var list wire.SchedulesResponse
	if st := f.call(t, "GET", "/v1/schedules", admin, "", &list); st != 200 || len(list.Schedules) != 2 || list.NextAfter != "b" {
		t.Fatalf("schedules: %d, %d of them, next after %q; want 2 and b", st, len(list.Schedules), list.NextAfter)
	}
	list = wire.SchedulesResponse{}
	if st := f.call(t, "GET", "/v1/schedules?after=b", admin, "", &list); st != 200 || len(list.Schedules) != 1 ||
		list.Schedules[0].Name != "c" || list.NextAfter != "" {
		t.Fatalf("schedules after b: %d, %d of them, next after %q; want c and no more", st, len(list.Schedules), list.NextAfter)
	}
}

// TestRevocationEndsWaitingReceives : revoking a key
// answers its waiting receives with 401 at once; a message sent after the
// revocation is not handed to it.
func TestRevocationEndsWaitingReceives(t *testing.T) {
	f := start(t, broker.Config{MaxLongPolls: 1})
	consumerKey, id := f.key(t, keys.Consumer, "q")
	type answer struct {
		status int
		body   string
	}
	answered := make(chan answer, 1)
	longPoll := func() {
		go func() {
			resp := f.send(t, "POST", "/v1/queues/q/receive", consumerKey, []byte(`{"wait_ms":3600000}`))
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answered <- answer{resp.StatusCode, string(b)}
		}()
	}
	longPoll()
	// Once the long-poll holds the one slot, a probe is refused (503).
	for {
		if st, _ := f.do(t, "POST", "/v1/queues/q/receive", f.keys["admin"], []byte(`{"wait_ms":10}`)); st == 503 {
			break
		}
		select {
		case a := <-answered: // the probe held the slot: the long-poll was refused
			if a.status != 503 {
				t.Fatalf("long-poll: %d %s", a.status, a.body)
			}
			longPoll()
		default:
		}
	}
	if st, e := f.do(t, "DELETE", "/v1/keys/"+id, f.keys["admin"], nil); st != 204 {
		t.Fatalf("revoke: %d %+v", st, e)
	}
	if st, e := f.do(t, "POST", "/v1/queues/q/messages", f.keys["producer"], []byte(`{"body":"eA=="}`)); st != 201 {
		t.Fatalf("send: %d %+v", st, e)
	}
	a := <-answered
	if a.status != 401 {
		t.Fatalf("the revoked key's waiting receive answered %d %s, want 401", a.status, a.body)
	}
	msgs, err := f.tb.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].DeliveryCount != 0 {
		t.Fatalf("the message sent after the revocation: %+v, %v; want it undelivered", msgs, err)
	}
}

// TestScheduleDurationsThatOverflowAreRefused: a schedule duration that overflows is refused.
func TestScheduleDurationsThatOverflowAreRefused(t *testing.T) {
	f := start(t, broker.Config{})
	for _, body := range []string{
		`{"name":"s","options":{"target":"q","every_ms":288230376151712744}}`,
		`{"name":"s","options":{"target":"q","every_ms":9223372036854775807}}`,
		`{"name":"s","options":{"target":"q","every_ms":-9223372036854775808}}`,
		`{"name":"s","options":{"target":"q","every_ms":60000,"ttl_ms":288230376151712744}}`,
	} {
		if st, e := f.do(t, "POST", "/v1/schedules", f.keys["admin"], []byte(body)); st != 400 || e.Code != wire.CodeInvalid {
			t.Errorf("%s: %d %+v, want 400", body, st, e)
		}
	}
	if ss, err := f.tb.Store.ListSchedules(ctx, mqlite.ListSchedulesParams{}); err != nil || len(ss) != 0 {
		t.Fatalf("schedules after refused creations: %+v, %v", ss, err)
	}
	if err := f.tb.Store.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	body := `{"options":{"target":"q","every_ms":288230376151712744}}`
	if st, e := f.do(t, "PUT", "/v1/schedules/s", f.keys["admin"], []byte(body)); st != 400 {
		t.Errorf("update: %d %+v, want 400", st, e)
	}
	if s, err := f.tb.Store.GetSchedule(ctx, "s"); err != nil || s.Options.Every != time.Minute {
		t.Fatalf("after the refused update: %+v, %v", s, err)
	}
}

// TestInvalidUTF8IsRefused : a request with invalid UTF-8
// in a JSON string, raw or as a lone surrogate escape, is refused, so two
// distinct ids never become one.
func TestInvalidUTF8IsRefused(t *testing.T) {
	f := start(t, broker.Config{})
	for _, body := range []string{
		"{\"body\":\"eA==\",\"message_id\":\"a\xff\"}",
		"{\"body\":\"eQ==\",\"message_id\":\"a\xfe\"}",
		`{"body":"eA==","message_id":"a\ud800"}`,
		`{"body":"eA==","message_id":"a\udc00\ud800"}`,
		"{\"body\":\"eA==\",\"properties\":{\"k\xc3\":\"v\"}}",
		"{\"body\":\"eA==\",\"subject\":\"\xed\xa0\x80\"}",
	} {
		if st, e := f.do(t, "POST", "/v1/queues/q/messages", f.keys["producer"], []byte(body)); st != 400 || e.Code != wire.CodeInvalid {
			t.Errorf("%q: %d %+v, want 400", body, st, e)
		}
	}
	// A valid surrogate pair is one character, and welcome.
	if st, e := f.do(t, "POST", "/v1/queues/q/messages", f.keys["producer"], []byte(`{"body":"eA==","message_id":"\ud83d\ude00"}`)); st != 201 {
		t.Errorf("a surrogate pair: %d %+v", st, e)
	}
	msgs, err := f.tb.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "\U0001F600" {
		t.Fatalf("stored: %+v, %v; want only the valid message", msgs, err)
	}
}

// TestRedriveSeqsAreBounded : the seqs of a redrive,
// and of a purge of selected messages, are a batch.
func TestRedriveSeqsAreBounded(t *testing.T) {
	f := start(t, broker.Config{MaxBatch: 3})
	for _, tc := range []struct{ path, body string }{
		{"/v1/queues/q/dead-letters/redrive", `{"seqs":[%s]}`},
		{"/v1/queues/q/purge", `{"state":"dead_lettered","seqs":[%s]}`},
	} {
		st, e := f.do(t, "POST", tc.path, f.keys["admin"], fmt.Appendf(nil, tc.body, "1,2,3,4"))
		if st != 413 || e.Reason != wire.ReasonBatchTooLarge {
			t.Fatalf("%s, 4 seqs over 3: %d %+v, want 413 %s", tc.path, st, e, wire.ReasonBatchTooLarge)
		}
		if st, e := f.do(t, "POST", tc.path, f.keys["admin"], fmt.Appendf(nil, tc.body, "1,2,3")); st != 200 {
			t.Fatalf("%s, 3 seqs: %d %+v", tc.path, st, e)
		}
	}
}

// TestNamesOutsideTheScopeDoNotLeak : a schedule outside
// the key's scope answers as an unknown one; topic answers and a send's
// copies name no subscription queue outside the key's scope.
func TestNamesOutsideTheScopeDoNotLeak(t *testing.T) {
	f := start(t, broker.Config{})
	if err := f.tb.Store.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	other := f.keys["other"]
	for _, c := range []struct{ method, body string }{
		{"GET", ""}, {"DELETE", ""}, {"PUT", `{"options":{"target":"other","every_ms":60000}}`},
	} {
		stS, eS := f.do(t, c.method, "/v1/schedules/s", other, []byte(c.body))
		stU, eU := f.do(t, c.method, "/v1/schedules/unknown", other, []byte(c.body))
		eU.Message = strings.ReplaceAll(eU.Message, "unknown", "s")
		if stS != 404 || stS != stU || eS != eU {
			t.Errorf("%s: out of scope %d %+v, unknown %d %+v; want the same 404", c.method, stS, eS, stU, eU)
		}
	}
	if s, err := f.tb.Store.GetSchedule(ctx, "s"); err != nil || s.Options.Target != "q" {
		t.Fatalf("the schedule after the refused calls: %+v, %v", s, err)
	}

	f.subscribe(t, "mine", "theirs")
	scoped, _ := f.key(t, keys.Admin, "t", "mine")
	var list wire.TopicsResponse
	if st := f.call(t, "GET", "/v1/topics", scoped, "", &list); st != 200 || len(list.Topics) != 1 ||
		!slices.Equal(subscriptionQueues(list.Topics[0]), []string{"mine"}) {
		t.Errorf("topic listing: %d %+v, want t with mine only", st, list)
	}
	var one wire.Topic
	if st := f.call(t, "GET", "/v1/topics/t", scoped, "", &one); st != 200 || !slices.Equal(subscriptionQueues(one), []string{"mine"}) {
		t.Errorf("GET t: %d %+v, want mine only", st, one)
	}
	if st := f.call(t, "PUT", "/v1/topics/t/subscriptions/mine", scoped, `{"filter":{}}`, &one); st != 200 ||
		!slices.Equal(subscriptionQueues(one), []string{"mine"}) {
		t.Errorf("PUT mine answered %d %+v, want mine only", st, one)
	}
	producer, _ := f.key(t, keys.Producer, "t", "mine")
	var sent wire.SendResult
	if st := f.call(t, "POST", "/v1/queues/t/messages", producer, `{"body":"eA==","subject":"s"}`, &sent); st != 201 ||
		len(sent.Copies) != 1 || sent.Copies[0].Queue != "mine" || sent.Seq != sent.Copies[0].Seq {
		t.Errorf("send to t: %d %+v, want the copy in mine only", st, sent)
	}
	var batch wire.SendBatchResponse
	if st := f.call(t, "POST", "/v1/queues/t/messages/batch", producer, `{"messages":[{"body":"eQ==","subject":"s"}]}`, &batch); st != 200 ||
		len(batch.Results) != 1 || len(batch.Results[0].Copies) != 1 || batch.Results[0].Copies[0].Queue != "mine" {
		t.Errorf("batch to t: %d %+v, want the copy in mine only", st, batch)
	}
	if st, err := f.tb.Store.Stats(ctx, "theirs"); err != nil || st.Active != 2 {
		t.Errorf("theirs: %+v, %v; want both copies, whatever the answer showed", st, err)
	}
}

// TestUpdateScheduleChecksItsCurrentTarget: a key that covers the new
// target but not the schedule's current one cannot re-target it.
func TestUpdateScheduleChecksItsCurrentTarget(t *testing.T) {
	f := start(t, broker.Config{})
	for _, q := range []string{"other", "third"} {
		f.tb.Queue(t, q, mqlite.QueueOptions{})
	}
	if err := f.tb.Store.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: "q", Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	scoped, _ := f.key(t, keys.Admin, "other", "third")
	for _, target := range []string{"other", "third"} {
		body := fmt.Appendf(nil, `{"options":{"target":%q,"every_ms":60000}}`, target)
		if st, e := f.do(t, "PUT", "/v1/schedules/s", scoped, body); st < 400 {
			t.Errorf("re-target to %s: %d %+v, want a refusal", target, st, e)
		}
	}
	if s, err := f.tb.Store.GetSchedule(ctx, "s"); err != nil || s.Options.Target != "q" {
		t.Fatalf("the schedule: %+v, %v; want its target unchanged", s, err)
	}
}

// TestDelaysAreBounded : abandon's delay and a send's
// deliver_at are at most mqlite.MaxDelay away, the store's bound; an admin
// makes a scheduled message due now.
func TestDelaysAreBounded(t *testing.T) {
	f := start(t, broker.Config{})
	now := f.tb.Clock.Now()
	maxMS := mqlite.MaxDelay.Milliseconds()
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"deliver_at at the bound", fmt.Sprintf(`{"body":"YQ==","deliver_at":%q}`, now.Add(mqlite.MaxDelay).Format(time.RFC3339Nano)), 201},
		{"deliver_at past the bound", fmt.Sprintf(`{"body":"Yg==","deliver_at":%q}`, now.Add(mqlite.MaxDelay+time.Millisecond).Format(time.RFC3339Nano)), 400},
		{"deliver_at in 2319", `{"body":"Yw==","deliver_at":"2319-01-01T00:00:00Z"}`, 400},
	} {
		if st, e := f.do(t, "POST", "/v1/queues/q/messages", f.keys["producer"], []byte(c.body)); st != c.status {
			t.Errorf("%s: %d %+v, want %d", c.name, st, e, c.status)
		}
	}
	st, e := f.do(t, "POST", "/v1/queues/q/messages/batch", f.keys["producer"],
		[]byte(`{"messages":[{"body":"ZA=="},{"body":"ZQ==","deliver_at":"2319-01-01T00:00:00Z"}]}`))
	if st != 400 {
		t.Errorf("batch with a deliver_at in 2319: %d %+v, want 400", st, e)
	}
	if _, err := outbox.Send(ctx, f.tb.Store, "q", outbox.Message{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	var got wire.MessagesResponse
	if st := f.call(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], `{}`, &got); st != 200 || len(got.Messages) != 1 {
		t.Fatalf("receive: %d %+v", st, got)
	}
	m := got.Messages[0]
	for _, c := range []struct {
		delay  int64
		status int
	}{{maxMS + 1, 400}, {1 << 62, 400}, {maxMS, 204}} {
		body := fmt.Appendf(nil, `{"seq":%d,"token":%q,"delay_ms":%d}`, m.Seq, m.LockToken, c.delay)
		if st, e := f.do(t, "POST", "/v1/queues/q/abandon", f.keys["consumer"], body); st != c.status {
			t.Errorf("abandon delay_ms %d: %d %+v, want %d", c.delay, st, e, c.status)
		}
	}
	// Both parked messages are made due by an admin, at once.
	if st, e := f.do(t, "POST", "/v1/queues/q/deliver-now", f.keys["consumer"], []byte(`{}`)); st != 403 {
		t.Errorf("deliver-now with a consumer key: %d %+v, want 403", st, e)
	}
	if st, e := f.do(t, "POST", "/v1/queues/q/deliver-now", f.keys["other"], []byte(`{}`)); st != 403 {
		t.Errorf("deliver-now with an admin key over another queue: %d %+v, want 403", st, e)
	}
	var n wire.CountResponse
	if st := f.call(t, "POST", "/v1/queues/q/deliver-now", f.keys["admin"], fmt.Sprintf(`{"seqs":[%d]}`, m.Seq), &n); st != 200 || n.Count != 1 {
		t.Fatalf("deliver-now seq %d: %d %+v", m.Seq, st, n)
	}
	if st := f.call(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], `{"max":10}`, &got); st != 200 ||
		len(got.Messages) != 1 || got.Messages[0].Seq != m.Seq {
		t.Fatalf("receive after deliver-now: %d %+v, want seq %d only", st, got, m.Seq)
	}
	if st := f.call(t, "POST", "/v1/queues/q/deliver-now", f.keys["admin"], `{}`, &n); st != 200 || n.Count != 1 {
		t.Fatalf("deliver-now of every scheduled message: %d %+v, want 1", st, n)
	}
	if st := f.call(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], `{"max":10}`, &got); st != 200 || len(got.Messages) != 1 {
		t.Fatalf("receive the message sent for the bound: %d %+v", st, got)
	}
}

// TestAnswerHeadersAndAuthorizationScheme: /v1 answers are never cached nor
// sniffed, and the Bearer scheme is matched without regard to case.
func TestAnswerHeadersAndAuthorizationScheme(t *testing.T) {
	f := start(t, broker.Config{})
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, err := http.NewRequestWithContext(ctx, "GET", f.url+"/v1/whoami", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", scheme+" "+f.keys["consumer"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("scheme %q: %d", scheme, resp.StatusCode)
		}
		if cc, nos := resp.Header.Get("Cache-Control"), resp.Header.Get("X-Content-Type-Options"); cc != "no-store" || nos != "nosniff" {
			t.Errorf("headers: Cache-Control %q, X-Content-Type-Options %q", cc, nos)
		}
	}
	resp := f.send(t, "GET", "/v1/whoami", "", nil)
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("an error answer: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
}

// TestRefusedLongPollsAreNotErrors: a long-poll refused for lack of a slot
// and a receive the client gave up on are not logged at ERROR.
func TestRefusedLongPollsAreNotErrors(t *testing.T) {
	f := start(t, broker.Config{MaxLongPolls: 1})
	holder, id := f.key(t, keys.Consumer, "q")
	cctx, cancel := context.WithCancel(ctx)
	held := make(chan struct{})
	go func() {
		defer close(held)
		for cctx.Err() == nil { // until it holds the slot and is cancelled
			req, _ := http.NewRequestWithContext(cctx, "POST", f.url+"/v1/queues/q/receive", strings.NewReader(`{"wait_ms":3600000}`))
			req.Header.Set("Authorization", "Bearer "+holder)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	for refused := 0; refused < 20; {
		if st, _ := f.do(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], []byte(`{"wait_ms":10}`)); st == 503 {
			refused++
		}
	}
	cancel()
	<-held
	// The request line of the cancelled long-poll is its handler's last.
	for !slices.ContainsFunc(strings.Split(f.log.String(), "\n"), func(l string) bool {
		return strings.Contains(l, `"msg":"broker: request"`) && strings.Contains(l, id)
	}) {
		runtime.Gosched()
	}
	if strings.Contains(f.log.String(), `"level":"ERROR"`) {
		t.Fatalf("refused or cancelled receives were logged at ERROR:\n%.3000s", f.log.String())
	}
}

// TestNegativeDurationsAreRefused: a duration of milliseconds below -1 (the
// "off" value) is refused with 400 and changes nothing; it was read as -1,
// turning an option off that the caller never asked to turn off.
func TestNegativeDurationsAreRefused(t *testing.T) {
	f := start(t, broker.Config{})
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/queues", `{"name":"neg","options":{"dedup_window_ms":-5}}`},
		{"POST", "/v1/queues", `{"name":"neg","options":{"dlq":{"max_age_ms":-2}}}`},
		{"PUT", "/v1/queues/q", `{"options":{"default_ttl_ms":-7}}`},
		{"POST", "/v1/queues/q/messages", `{"body":"eA==","ttl_ms":-3}`},
		{"POST", "/v1/queues/q/receive", `{"wait_ms":-9}`},
	} {
		st, e := f.do(t, tc.method, tc.path, f.keys["admin"], []byte(tc.body))
		if st != 400 {
			t.Errorf("%s %s %s: %d %+v, want 400", tc.method, tc.path, tc.body, st, e)
		}
	}
	if st, _ := f.do(t, "GET", "/v1/queues/neg", f.keys["admin"], nil); st != 404 {
		t.Errorf("a refused create made the queue: %d", st)
	}
}
