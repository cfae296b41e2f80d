package broker_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestLongLockTokensAreRefused: a lock token longer than the store ever
// hands out is refused with 400 invalid by every endpoint that takes one,
// the stream's lines included, and changes nothing: the delivery it names
// stays locked, and its real token completes it after. Such tokens were
// read, held and passed to the store (409 lock_lost), without a bound but
// the body's.
func TestLongLockTokensAreRefused(t *testing.T) {
	f := start(t, broker.Config{})
	if _, err := outbox.Send(ctx, f.tb.Store, "q", outbox.Message{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	var got wire.MessagesResponse
	if st := f.call(t, "POST", "/v1/queues/q/receive", f.keys["consumer"], `{"max":1}`, &got); st != 200 || len(got.Messages) != 1 {
		t.Fatalf("receive: %d %+v", st, got)
	}
	m := got.Messages[0]
	long := m.LockToken + strings.Repeat("0", 1<<10)
	lock := fmt.Sprintf(`{"seq":%d,"token":%q}`, m.Seq, long)
	tests := []struct{ path, body string }{
		{"complete", lock},
		{"abandon", lock},
		{"release", lock},
		{"reject", lock},
		{"defer", lock},
		{"renew", lock},
		{"complete-batch", `{"locks":[` + lock + `]}`},
		{"renew-batch", `{"locks":[` + lock + `]}`},
		{"complete-receive", `{"complete":[` + lock + `],"receive":{"max":1}}`},
	}
	for _, tc := range tests {
		if st, eb := f.do(t, "POST", "/v1/queues/q/"+tc.path, f.keys["consumer"], []byte(tc.body)); st != http.StatusBadRequest || eb.Code != wire.CodeInvalid {
			t.Errorf("%s: %d %+v, want 400 invalid", tc.path, st, eb)
		}
	}
	for _, line := range []string{`{"complete":[` + lock + `]}`, `{"abandon":[` + lock + `]}`, `{"reject":[` + lock + `]}`} {
		s := f.openStream(t, "q", f.keys["consumer"], 1)
		if _, err := s.lines.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		if ev := s.next(t); ev.Error == nil || ev.Error.Code != wire.CodeInvalid {
			t.Errorf("stream line %.40s…: event %+v, want the error invalid", line, ev)
		}
	}
	ok := fmt.Sprintf(`{"seq":%d,"token":%q}`, m.Seq, m.LockToken)
	if st, eb := f.do(t, "POST", "/v1/queues/q/complete", f.keys["consumer"], []byte(ok)); st != http.StatusNoContent {
		t.Fatalf("complete with the real token after: %d %+v, want 204 (the delivery untouched)", st, eb)
	}
}
