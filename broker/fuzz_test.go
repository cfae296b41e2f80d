package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// fuzzDecoder checks one request decoder on arbitrary bytes: it never
// panics, accepts only UTF-8, a value it accepts converts to the store's arguments without
// panicking (use), and encodes back to JSON that decodes to the same value.
// The corpus each target starts from is in testdata/fuzz/<name>/.
func fuzzDecoder[T any](f *testing.F, use func(T)) {
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeBytes[T](data)
		if err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted a body that is not UTF-8: %q", data)
		}
		use(v)
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", v, err)
		}
		w, err := decodeBytes[T](again)
		if err != nil {
			t.Fatalf("re-decode %s: %v", again, err)
		}
		if !reflect.DeepEqual(normal(t, v), normal(t, w)) {
			t.Fatalf("round trip changed the value:\n%#v\n%#v", v, w)
		}
	})
}

// normal is v's JSON form, so that nil and empty (and time zones) compare
// equal.
func normal(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func FuzzDecodeSend(f *testing.F) {
	fuzzDecoder(f, func(m wire.SendMessage) { _ = m.Outbox() })
}

func FuzzDecodeSendBatch(f *testing.F) {
	fuzzDecoder(f, func(r wire.SendBatchRequest) {
		for _, m := range r.Messages {
			_ = m.Outbox()
		}
	})
}

func FuzzDecodeReceive(f *testing.F) {
	fuzzDecoder(f, func(r wire.ReceiveRequest) { _, _ = r.Options() })
}

// tokenBound panics (a fuzz failure) unless checkTokens refuses exactly
// the tokens longer than MaxLockTokenBytes, with an invalid error.
func tokenBound(tokens ...string) {
	long := slices.ContainsFunc(tokens, func(tok string) bool { return len(tok) > MaxLockTokenBytes })
	err := checkTokens(tokens...)
	if (err != nil) != long || err != nil && errorBody(err).Code != wire.CodeInvalid {
		panic(fmt.Sprintf("tokens %q: %v", tokens, err))
	}
}

// FuzzDecodeLock: the body of complete, release, defer and renew.
func FuzzDecodeLock(f *testing.F) {
	fuzzDecoder(f, func(r wire.LockRequest) {
		_ = r.Lock("q")
		tokenBound(r.Token)
	})
}

func FuzzDecodeLocks(f *testing.F) {
	fuzzDecoder(f, func(r wire.LocksRequest) {
		for _, l := range r.Locks {
			_ = l.Lock("q")
			tokenBound(l.Token)
		}
	})
}

func FuzzDecodeAbandon(f *testing.F) {
	fuzzDecoder(f, func(r wire.AbandonRequest) {
		_ = wire.MSDur(r.DelayMS)
		tokenBound(r.Token)
	})
}

func FuzzDecodeReject(f *testing.F) {
	fuzzDecoder(f, func(r wire.RejectRequest) { tokenBound(r.Token) })
}

func FuzzDecodeSeq(f *testing.F) { fuzzDecoder(f, func(wire.SeqRequest) {}) }

func FuzzDecodeRedrive(f *testing.F) { fuzzDecoder(f, func(wire.RedriveRequest) {}) }

func FuzzDecodePurge(f *testing.F) { fuzzDecoder(f, func(wire.PurgeRequest) {}) }

func FuzzDecodeDeliverNow(f *testing.F) { fuzzDecoder(f, func(wire.DeliverNowRequest) {}) }

func FuzzDecodeCreateQueue(f *testing.F) {
	fuzzDecoder(f, func(r wire.CreateQueueRequest) { _, _ = r.Options.Options() })
}

func FuzzDecodeUpdateQueue(f *testing.F) {
	fuzzDecoder(f, func(r wire.UpdateQueueRequest) { _, _ = r.Options.Options() })
}

func FuzzDecodeCreateTopic(f *testing.F) { fuzzDecoder(f, func(wire.CreateTopicRequest) {}) }

func FuzzDecodeCreateSubscription(f *testing.F) {
	fuzzDecoder(f, func(r wire.CreateSubscriptionRequest) { _, _ = r.Options.Options() })
}

func FuzzDecodeUpdateSubscription(f *testing.F) {
	fuzzDecoder(f, func(wire.UpdateSubscriptionRequest) {})
}

func FuzzDecodeCreateKey(f *testing.F) { fuzzDecoder(f, func(wire.CreateKeyRequest) {}) }

func FuzzDecodeBackup(f *testing.F) { fuzzDecoder(f, func(wire.BackupRequest) {}) }

func FuzzDecodeCreateSchedule(f *testing.F) {
	fuzzDecoder(f, func(r wire.CreateScheduleRequest) { _, _ = r.Options.Options() })
}

func FuzzDecodeUpdateSchedule(f *testing.F) {
	fuzzDecoder(f, func(r wire.UpdateScheduleRequest) { _, _ = r.Options.Options() })
}

// FuzzClientHeader: a Mqlite-Client value is taken whole or refused with a
// coded error, never trimmed; what is taken is bounded and plain ASCII.
func FuzzClientHeader(f *testing.F) {
	for _, s := range []string{"", "ABC123", "a.b_c-d", "a b", "é", string(make([]byte, 65))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		r := httptest.NewRequest("POST", "/v1/queues/q/receive", nil)
		r.Header.Set(wire.ClientHeader, name)
		ctx, err := receiverCtx(r)
		if err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		got := r.Header.Get(wire.ClientHeader)
		if len(got) > wire.MaxClientNameLen || !wire.ValidClientName(got) || ctx == nil {
			t.Fatalf("took %q", got)
		}
	})
}

// FuzzPauseBody: the pause and resume endpoints take no body; any byte of
// one is refused with a coded error, and none is accepted.
func FuzzPauseBody(f *testing.F) {
	for _, s := range []string{"", "{}", "x", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/queues/q/pause", bytes.NewReader(body))
		err := noBody(r)
		if (err == nil) != (len(body) == 0) {
			t.Fatalf("body %q: %v", body, err)
		}
		if err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
		}
	})
}

// FuzzFindQuery: the query of a find is decoded or refused with a coded
// error, never with a panic; an unknown or repeated parameter is refused.
func FuzzFindQuery(f *testing.F) {
	for _, s := range []string{"", "state=active&max=5", "subject_prefix=order.&scan_max=100", "x=1", "max=1&max=2",
		"property_key=tenant&property_value=a", "max=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		opts, err := findOptions(q)
		if err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		for name, vs := range q {
			if !findParams[name] || len(vs) != 1 {
				t.Fatalf("took %q", raw)
			}
		}
		_ = opts
	})
}

// FuzzPeekQuery: the query of a peek or of the dead-letter listing is
// decoded or refused with a coded error, never with a panic; an unknown or
// repeated parameter is refused.
func FuzzPeekQuery(f *testing.F) {
	for _, s := range []string{"", "from_seq=3&max=5", "max_bytes=100", "state=active", "max=1&max=2",
		"max=99999999999999999999", "from_seq=-1", "max=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if _, err := decodePeekQuery(q); err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		for name, vs := range q {
			if !peekParams[name] || len(vs) != 1 {
				t.Fatalf("took %q", raw)
			}
		}
	})
}

func FuzzDecodeStreamSettle(f *testing.F) {
	fuzzDecoder(f, func(r wire.StreamSettle) {
		var tokens []string
		for _, l := range r.Complete {
			_ = l.Lock("q")
			tokens = append(tokens, l.Token)
		}
		for _, a := range r.Abandon {
			tokens = append(tokens, a.Token)
		}
		for _, rj := range r.Reject {
			tokens = append(tokens, rj.Token)
		}
		tokenBound(tokens...)
		if (checkStreamTokens(r) == nil) != (checkTokens(tokens...) == nil) {
			panic(fmt.Sprintf("a line's tokens %q: checkStreamTokens and checkTokens differ", tokens))
		}
		_ = r.Items()
	})
}

// FuzzStreamLines runs the stream's line reader over arbitrary bytes with a
// small line bound: it never panics, hands over only non-blank lines no
// longer than the bound, and each line it decodes is a settlement object.
func FuzzStreamLines(f *testing.F) {
	f.Add([]byte("{\"complete\":[{\"seq\":1,\"token\":\"ab\"}]}\n\n{\"release\":[2]}\r\n"))
	f.Add([]byte("{}\n[1]\n"))
	f.Add([]byte("{\"abandon\":[{\"seq\":1,\"token\":\"x\",\"delay_ms\":-1}]}"))
	const max = 256
	f.Fuzz(func(t *testing.T, data []byte) {
		err := readStreamLines(bytes.NewReader(data), max, func(line []byte) error {
			if len(line) == 0 || len(line) > max {
				t.Fatalf("a line of %d bytes", len(line))
			}
			v, err := decodeBytes[wire.StreamSettle](line)
			if err != nil {
				return err
			}
			if !utf8.Valid(line) {
				t.Fatalf("accepted a line that is not UTF-8: %q", line)
			}
			_ = v.Items()
			return checkStreamTokens(v)
		})
		if err != nil {
			if eb := errorBody(err); eb.Code == "" || eb.Reason == "" {
				t.Fatalf("error without a code: %v", err)
			}
		}
	})
}

func FuzzDecodeCommit(f *testing.F) {
	fuzzDecoder(f, func(r wire.CommitRequest) {
		for _, c := range r.Complete {
			_ = c.Lock()
			tokenBound(c.Token)
		}
		for _, rj := range r.Reject {
			_ = rj.Lock()
			tokenBound(rj.Token)
		}
		for _, s := range r.Send {
			for _, m := range s.Messages {
				_ = m.Outbox()
			}
		}
		for _, c := range r.Carry {
			_ = c.Message.Outbox()
		}
		for _, j := range r.Jobs {
			rj := j.RawJob()
			if rj.Validate() != nil {
				continue
			}
			// Encoded once, a valid job crosses the wire unchanged.
			once := wire.FromRawJob(rj)
			if twice := wire.FromRawJob(once.RawJob()); normalJSON(twice) != normalJSON(once) {
				panic(fmt.Sprintf("a valid job does not cross the wire: %s, then %s", normalJSON(once), normalJSON(twice)))
			}
		}
		keyed := r
		keyed.IdempotencyKey += "-other"
		if commitDigest(r) != commitDigest(keyed) {
			panic("the digest of a commit request depends on its idempotency key")
		}
		derived := r.LocksKey()
		if (derived == "") != (len(r.Complete)+len(r.Reject) == 0) || len(derived) > mqlite.MaxMessageIDLen {
			panic("a derived key for a request that settles nothing, none for one that settles, or one past the bound")
		}
		swapped := r
		swapped.Complete = slices.Clone(r.Complete)
		slices.Reverse(swapped.Complete)
		if swapped.LocksKey() != derived {
			panic("the derived key depends on the order of the locks")
		}
	})
}

// normalJSON is v's JSON, for comparisons inside a fuzz target's use.
func normalJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
