package broker_test

import (
	"strings"
	"testing"

	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
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
