package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestCommitNamesNothingOutsideTheScope: a key that does not cover a queue
// of a commit gets the same 403 whether the queue exists or not, before
// anything is read, and a send to a topic answers with the copies of the
// queues the key covers only.
func TestCommitNamesNothingOutsideTheScope(t *testing.T) {
	f := start(t, broker.Config{})
	other := f.keys["other"]
	for _, item := range []string{
		`"complete":[{"queue":"%s","seq":1,"token":"t"}]`,
		`"reject":[{"queue":"%s","seq":1,"token":"t","reason":"r"}]`,
		`"send":[{"queue":"%s","messages":[{"body":"eA=="}]}]`,
	} {
		body := func(q string) []byte { return []byte("{" + strings.ReplaceAll(item, "%s", q) + "}") }
		stQ, eQ := f.do(t, "POST", "/v1/commit", other, body("q"))
		stN, eN := f.do(t, "POST", "/v1/commit", other, body("nope"))
		eN.Message = strings.ReplaceAll(eN.Message, `"nope"`, `"q"`)
		if stQ != 403 || eQ.Reason != wire.ReasonQueue || stQ != stN || eQ != eN {
			t.Errorf("%s: existing %d %+v, missing %d %+v; want the same 403", item, stQ, eQ, stN, eN)
		}
	}

	for _, body := range []string{
		`{"complete":[{"queue":"","seq":1,"token":"t"}]}`,
		`{"send":[{"queue":"","messages":[{"body":"eA=="}]}]}`,
	} {
		if st, e := f.do(t, "POST", "/v1/commit", other, []byte(body)); st != 400 || e.Reason != "invalid_queue_name" {
			t.Errorf("%s: %d %+v, want 400 invalid_queue_name", body, st, e)
		}
	}

	f.subscribe(t, "mine", "theirs")
	scoped, _ := f.key(t, keys.Admin, "t", "mine")
	var out wire.CommitResponse
	if st := f.call(t, "POST", "/v1/commit", scoped, `{"send":[{"queue":"t","messages":[{"body":"eA==","subject":"s"}]}]}`, &out); st != 200 ||
		len(out.Sends) != 1 || len(out.Sends[0].Results) != 1 || len(out.Sends[0].Results[0].Copies) != 1 ||
		out.Sends[0].Results[0].Copies[0].Queue != "mine" {
		t.Errorf("commit to t: %d %+v, want the copy in mine only", st, out)
	}
	if st, err := f.tb.Store.Stats(ctx, "theirs"); err != nil || st.Active != 1 {
		t.Errorf("theirs: %+v, %v; want its copy, whatever the answer showed", st, err)
	}
}

// commitFixture is start's fixture with a queue "out" and one delivery of
// "q" to move there.
func commitFixture(t *testing.T, cfg broker.Config) (*fixture, mqlite.Message) {
	t.Helper()
	f := start(t, cfg)
	f.tb.Queue(t, "out", mqlite.QueueOptions{})
	if _, err := outbox.Send(ctx, f.tb.Store, "q", outbox.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := f.tb.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	return f, msgs[0]
}

// moveBody is the body of a commit request that completes m and sends one
// message to "out", under idem ("" for none).
func moveBody(m mqlite.Message, idem string) string {
	req := wire.CommitRequest{IdempotencyKey: idem, Complete: []wire.CommitLock{wire.FromLock(m.Lock())},
		Send: []wire.CommitSend{{Queue: "out", Messages: []wire.SendMessage{{Body: []byte("onward")}}}}}
	b, _ := json.Marshal(req)
	return string(b)
}

// rows counts the rows of query.
func (f *fixture) rows(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	return testdb.Int(t, f.tb.Store.DB(), query, args...)
}

const commitRecordsQuery = `SELECT count(*) FROM mqlite_commits`

// TestCommitWithoutKeyCommitsOnce: the same commit request sent ten times
// without an idempotency key commits once; the others replay its answer
// (the key derived from its locks), and the same locks with other sends
// are a conflict. A request that settles nothing derives no key.
func TestCommitWithoutKeyCommitsOnce(t *testing.T) {
	f, m := commitFixture(t, broker.Config{})
	body := moveBody(m, "")
	var first wire.CommitResponse
	for i := range 10 {
		var out wire.CommitResponse
		if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], body, &out); st != 200 || out.Replayed != (i > 0) {
			t.Fatalf("request %d: %d %+v, want 200 and replayed after the first", i, st, out)
		}
		if i == 0 {
			first = out
		} else if out.Sends[0].Results[0].Seq != first.Sends[0].Results[0].Seq {
			t.Fatalf("request %d answered seq %d, want the first's %d", i, out.Sends[0].Results[0].Seq, first.Sends[0].Results[0].Seq)
		}
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'out'`); n != 1 {
		t.Fatalf("out holds %d messages after ten identical commits, want 1", n)
	}
	other := strings.Replace(body, `"b253YXJk"`, `"b3RoZXI="`, 1)
	if st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(other)); st != 409 || e.Reason != "already_settled" {
		t.Fatalf("the same locks with another send: %d %+v, want 409 already_settled", st, e)
	}
	sendOnly := `{"send":[{"queue":"out","messages":[{"body":"eA=="}]}]}`
	for range 2 {
		if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], sendOnly, nil); st != 200 {
			t.Fatalf("send only: %d", st)
		}
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'out'`); n != 3 {
		t.Fatalf("out holds %d messages, want 3: a send-only request without a key is a send", n)
	}
}

// TestCommitWithNewKeyRefusesSettled: a new idempotency key does not let
// the token of a completed delivery commit the request's sends again.
func TestCommitWithNewKeyRefusesSettled(t *testing.T) {
	f, m := commitFixture(t, broker.Config{})
	skipUnlessSettledFails(t, f.tb)
	for i := range 10 {
		st, e := f.do(t, "POST", "/v1/commit", f.keys["worker"], []byte(moveBody(m, fmt.Sprint("key-", i))))
		if want := 200; i == 0 && st != want {
			t.Fatalf("first request: %d %+v", st, e)
		}
		if i > 0 && st != 409 {
			t.Errorf("request %d under a new key: %d %+v, want 409 (the delivery is settled)", i, st, e)
		}
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'out'`); n != 1 {
		t.Fatalf("out holds %d messages after ten commits of one delivery, want 1", n)
	}
}

// TestCommitRecordsPerAccessKey: one access key's idempotency key is not
// another's: the same request under the same idempotency key from a
// second access key commits anew, and is not answered from the first's
// record.
func TestCommitRecordsPerAccessKey(t *testing.T) {
	f := start(t, broker.Config{})
	body := `{"idempotency_key":"k","send":[{"queue":"q","messages":[{"body":"eA=="}]}]}`
	for _, name := range []string{"producer", "worker"} {
		var out wire.CommitResponse
		if st := f.call(t, "POST", "/v1/commit", f.keys[name], body, &out); st != 200 || out.Replayed {
			t.Fatalf("%s: %d %+v, want its own commit, not a replay", name, st, out)
		}
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q'`); n != 2 {
		t.Fatalf("q holds %d messages, want one per access key", n)
	}
}

// TestCommitRecordExpiresByTime: 30 minutes after it, a record answers
// nothing even though the janitor (off here) has not removed it: the same
// idempotency key then commits other items.
func TestCommitRecordExpiresByTime(t *testing.T) {
	f := start(t, broker.Config{})
	send := func(body string) string {
		return `{"idempotency_key":"k","send":[{"queue":"q","messages":[{"body":"` + body + `"}]}]}`
	}
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], send("eA=="), nil); st != 200 {
		t.Fatalf("first: %d", st)
	}
	f.tb.Clock.Advance(30*time.Minute + time.Millisecond)
	var out wire.CommitResponse
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], send("eQ=="), &out); st != 200 || out.Replayed {
		t.Fatalf("the key after 30 minutes with other items: %d %+v, want a new commit", st, out)
	}
}

// TestCommitScopeBeforeRecord: a request naming a queue the key does not
// cover is 403 even under an idempotency key the key used already (not
// 409 from the record).
func TestCommitScopeBeforeRecord(t *testing.T) {
	f := start(t, broker.Config{})
	scoped, _ := f.key(t, keys.Worker, "q")
	if st := f.call(t, "POST", "/v1/commit", scoped, `{"idempotency_key":"k","send":[{"queue":"q","messages":[{"body":"eA=="}]}]}`, nil); st != 200 {
		t.Fatalf("first: %d", st)
	}
	if st, e := f.do(t, "POST", "/v1/commit", scoped, []byte(`{"idempotency_key":"k","send":[{"queue":"other","messages":[{"body":"eA=="}]}]}`)); st != 403 {
		t.Fatalf("the key over a queue it does not cover: %d %+v, want 403", st, e)
	}
}

// TestCommitTopicConflictHidesSeq: a commit to a topic whose message id
// conflicts in a subscription outside the key's scope fails (nothing
// commits) without naming that queue or its seq.
func TestCommitTopicConflictHidesSeq(t *testing.T) {
	f := start(t, broker.Config{})
	f.subscribe(t, "mine", "theirs")
	for i := range 7 { // theirs's seqs grow past mine's
		if _, err := outbox.Send(ctx, f.tb.Store, "theirs", outbox.Message{Body: []byte(fmt.Sprint(i)), MessageID: fmt.Sprint("id-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	scoped, _ := f.key(t, keys.Producer, "t", "mine")
	st, e := f.do(t, "POST", "/v1/commit", scoped, []byte(`{"send":[{"queue":"t","messages":[{"body":"eA==","subject":"s","message_id":"id-6"}]}]}`))
	if st != 409 || e.Reason != "duplicate_conflict" {
		t.Fatalf("conflict in theirs: %d %+v, want 409 duplicate_conflict", st, e)
	}
	if strings.Contains(e.Message, "seq") || strings.Contains(e.Message, "theirs") {
		t.Fatalf("conflict in theirs: the answer %q names something outside the key's scope", e.Message)
	}
	if n := f.rows(t, `SELECT count(*) FROM mqlite_messages WHERE queue = 'mine'`); n != 0 {
		t.Fatalf("mine holds %d messages after the failed commit, want 0", n)
	}
}

// TestCommitRecordsBounded: a keyed commit that wrote nothing (every
// message a duplicate) keeps no record, and one access key's records stay
// within Config.MaxCommitRecords, the oldest dropped.
func TestCommitRecordsBounded(t *testing.T) {
	f := start(t, broker.Config{MaxCommitRecords: 8})
	dup := `{"idempotency_key":"%s","send":[{"queue":"q","messages":[{"body":"eA==","message_id":"m"}]}]}`
	for i := range 3 {
		if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], fmt.Sprintf(dup, fmt.Sprint("dup-", i)), nil); st != 200 {
			t.Fatalf("dup %d: %d", i, st)
		}
	}
	if n := f.rows(t, commitRecordsQuery); n != 1 {
		t.Fatalf("%d records after one commit and two that wrote nothing, want 1", n)
	}
	most := int64(0)
	for i := range 40 {
		body := fmt.Sprintf(`{"idempotency_key":"k-%d","send":[{"queue":"q","messages":[{"body":"eA=="}]}]}`, i)
		if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], body, nil); st != 200 {
			t.Fatalf("commit %d: %d", i, st)
		}
		most = max(most, f.rows(t, commitRecordsQuery))
	}
	if most > 8 {
		t.Fatalf("one key held %d records, want 8 at most", most)
	}
	var out wire.CommitResponse
	last := `{"idempotency_key":"k-39","send":[{"queue":"q","messages":[{"body":"eA=="}]}]}`
	if st := f.call(t, "POST", "/v1/commit", f.keys["worker"], last, &out); st != 200 || !out.Replayed {
		t.Fatalf("the newest record: %d %+v, want its replay", st, out)
	}
	t.Logf("records of one key: %d at most over 41 commits", most)
}

// skipUnlessSettledFails skips t on a tree where consumer.CompleteTx of an
// already completed delivery still answers nil from its receipt (the
// settlement inside a transaction that mqlite.ErrAlreadySettled reports
// lands apart from the commit route).
func skipUnlessSettledFails(t *testing.T, tb *testdb.Bundle) {
	t.Helper()
	tb.Queue(t, "probe", mqlite.QueueOptions{})
	if _, err := outbox.Send(ctx, tb.Store, "probe", outbox.Message{Body: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := tb.Store.Receive(ctx, "probe", mqlite.ReceiveOptions{Max: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("probe: %d messages, %v", len(msgs), err)
	}
	if err := tb.Store.Complete(ctx, msgs[0].Lock()); err != nil {
		t.Fatal(err)
	}
	err = tb.Store.Tx(ctx, func(tx *mqlite.Tx) error { return consumer.CompleteTx(tx.Context(), tx.SQL(), msgs[0].Lock()) })
	if err == nil {
		t.Skip("consumer.CompleteTx of a settled delivery answers nil here: needs mqlite.ErrAlreadySettled")
	}
	if !errors.Is(err, mqlite.ErrAlreadySettled) {
		t.Fatalf("CompleteTx of a settled delivery: %v, want ErrAlreadySettled", err)
	}
}
