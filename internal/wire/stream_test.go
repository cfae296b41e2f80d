package wire_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/wire"
)

// sameAsMarshal fails unless AppendStreamEvent writes ev as json.Marshal does.
func sameAsMarshal(t *testing.T, ev wire.StreamEvent) {
	t.Helper()
	want, werr := json.Marshal(ev)
	got, gerr := wire.AppendStreamEvent([]byte("prefix"), ev)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("error %v, json.Marshal's %v", gerr, werr)
	}
	if werr != nil {
		return
	}
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("AppendStreamEvent wrote\n%s\njson.Marshal\n%s", got, want)
	}
}

// TestAppendStreamEventEveryField holds the encoder to json.Marshal with
// every field of a message and a result set: a field added to either shape
// and not to the encoder fails here.
func TestAppendStreamEventEveryField(t *testing.T) {
	t.Parallel()
	var m wire.ReceivedMessage
	fill(t, &m)
	var r wire.ItemResult
	r.Error = &wire.Error{}
	fill(t, r.Error)
	r.LockedUntil = time.UnixMilli(1_800_000_000_123).UTC()
	sameAsMarshal(t, wire.StreamEvent{Messages: []wire.ReceivedMessage{m, m}, Line: 7, Results: []wire.ItemResult{r, {}, {Error: r.Error}, {LockedUntil: r.LockedUntil}}})
	sameAsMarshal(t, wire.StreamEvent{Error: r.Error})
	sameAsMarshal(t, wire.StreamEvent{})
}

// TestAppendStreamEventRandom holds the encoder to json.Marshal over random
// events, with strings JSON escapes, bodies nil and empty, times in other
// zones and out of json's range.
func TestAppendStreamEventRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		sameAsMarshal(t, randomEvent(rng, tricky))
	}
}

// tricky are strings JSON escapes, and plain ones.
var tricky = []string{"", "orders", "a\"b", `back\slash`, "<tag>&", "tab\there", "nl\n", "é", "\u2028", "\x7f", "\xff", "ok-token_1.2"}

// randomEvent returns an event with strings of strs, nil and empty bodies,
// properties, times in other zones and out of json's range.
func randomEvent(rng *rand.Rand, strs []string) wire.StreamEvent {
	str := func() string { return strs[rng.IntN(len(strs))] }
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+30*60), time.FixedZone("odd", 3600+7), time.Local}
	tm := func() time.Time {
		switch rng.IntN(5) {
		case 0:
			return time.Time{}
		case 1:
			return time.Date(10000+rng.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC)
		}
		return time.UnixMilli(rng.Int64N(4_000_000_000_000)).Add(time.Duration(rng.IntN(1000))).In(zones[rng.IntN(len(zones))])
	}
	var ev wire.StreamEvent
	for range rng.IntN(3) {
		m := wire.ReceivedMessage{Queue: str(), Seq: rng.Int64() - rng.Int64(), MessageID: str(), GroupID: str(), Subject: str(),
			DeliveryCount: rng.IntN(10), EnqueuedAt: tm(), ExpiresAt: tm(), LockToken: str(), LockedUntil: tm(), State: str(),
			VisibleAt: tm(), DeadLetterReason: str(), DeadLetterDescription: str(), DeadLetteredAt: tm(), LastError: str(),
			Priority: rng.IntN(10)}
		switch rng.IntN(3) {
		case 0:
			m.Body = []byte{}
		case 1:
			m.Body = []byte(str() + str())
		}
		if rng.IntN(3) == 0 {
			m.Properties = map[string]string{}
			for range rng.IntN(4) {
				m.Properties[str()] = str()
			}
		}
		ev.Messages = append(ev.Messages, m)
	}
	if rng.IntN(2) == 0 {
		ev.Line = rng.Int64N(1000)
	}
	for range rng.IntN(3) {
		var r wire.ItemResult
		if rng.IntN(2) == 0 {
			r.Error = &wire.Error{Code: str(), Reason: str(), Message: str()}
		}
		r.LockedUntil = tm()
		ev.Results = append(ev.Results, r)
	}
	if rng.IntN(10) == 0 {
		ev.Error = &wire.Error{Code: str(), Reason: str(), Message: str()}
	}
	return ev
}

// BenchmarkStreamEvent compares the encoder with json.Marshal on the
// event a stream at a window of one writes per message: one message of
// 256 bytes and the result of one completion.
func BenchmarkStreamEvent(b *testing.B) {
	now := time.UnixMilli(1_800_000_000_123)
	ev := wire.StreamEvent{Messages: []wire.ReceivedMessage{{Queue: "orders", Seq: 123456, Body: bytes.Repeat([]byte("a"), 256),
		DeliveryCount: 1, EnqueuedAt: now, LockToken: "0123456789abcdef0123456789abcdef", LockedUntil: now.Add(30 * time.Second), State: "locked"}}}
	res := wire.StreamEvent{Line: 123455, Results: []wire.ItemResult{{}}}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range []wire.StreamEvent{ev, res} {
				if _, err := json.Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("AppendStreamEvent", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for _, e := range []wire.StreamEvent{ev, res} {
				var err error
				if buf, err = wire.AppendStreamEvent(buf, e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// sameAsUnmarshal fails unless a line ParseStreamEvent takes decodes to
// what json.Unmarshal gives.
func sameAsUnmarshal(t *testing.T, line []byte) (parsed bool) {
	t.Helper()
	got, ok := wire.ParseStreamEvent(line)
	if !ok {
		return false
	}
	var want wire.StreamEvent
	if err := json.Unmarshal(line, &want); err != nil {
		t.Fatalf("%s: ParseStreamEvent takes it, json.Unmarshal refuses it: %v", line, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: ParseStreamEvent\n%+v\njson.Unmarshal\n%+v", line, got, want)
	}
	return true
}

// TestParseStreamEvent: the events a stream writes per message take the
// fast path, to the value json.Unmarshal gives; random events (those of
// TestAppendStreamEventRandom) never decode to another value.
func TestParseStreamEvent(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_123)
	for _, ev := range []wire.StreamEvent{
		{Messages: []wire.ReceivedMessage{{Queue: "orders", Seq: 12, Body: []byte("body"), DeliveryCount: 1, EnqueuedAt: now,
			LockToken: "0123456789abcdef0123456789abcdef", LockedUntil: now.Add(time.Second), State: "locked", Priority: 7}}, Line: 3, Results: []wire.ItemResult{{}}},
		{Messages: []wire.ReceivedMessage{{Queue: "q", Seq: 1, Body: []byte{}, EnqueuedAt: now.UTC()}, {Queue: "q", Seq: 2, EnqueuedAt: now.In(time.FixedZone("x", 3600))}}},
		{Line: 1, Results: []wire.ItemResult{{Error: &wire.Error{Code: "conflict", Reason: "lock_lost", Message: "mqlite: lock lost"}}, {LockedUntil: now}}},
	} {
		line, err := wire.AppendStreamEvent(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsUnmarshal(t, line) {
			t.Fatalf("%s: not taken by ParseStreamEvent", line)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	parsed := 0
	for range 5000 {
		strs := tricky
		if rng.IntN(2) == 0 {
			strs = []string{"", "orders", "ok-token_1.2"}
		}
		line, err := wire.AppendStreamEvent(nil, randomEvent(rng, strs))
		if err != nil {
			continue
		}
		if sameAsUnmarshal(t, line) {
			parsed++
		}
	}
	if parsed < 500 {
		t.Fatalf("ParseStreamEvent took %d of the random events", parsed)
	}
}

// FuzzParseStreamEvent: a line ParseStreamEvent takes, json.Unmarshal
// takes to the same value.
func FuzzParseStreamEvent(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		if line, err := wire.AppendStreamEvent(nil, randomEvent(rng, tricky)); err == nil {
			f.Add(line)
		}
	}
	f.Add([]byte(`{"messages":[{"queue":"q","seq":01,"body":null,"delivery_count":0,"enqueued_at":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"line":1,"results":[{}]}`))
	f.Fuzz(func(t *testing.T, b []byte) { sameAsUnmarshal(t, b) })
}

// TestAppendStreamSettle holds AppendStreamSettle to json.Marshal.
func TestAppendStreamSettle(t *testing.T) {
	t.Parallel()
	for _, l := range []wire.StreamSettle{
		{},
		{Complete: []wire.LockRequest{{Seq: 1, Token: "0123456789abcdef0123456789abcdef"}}},
		{Complete: []wire.LockRequest{{Seq: -1, Token: ""}, {Seq: 1<<63 - 1, Token: "a<b"}}},
		{Complete: []wire.LockRequest{{Seq: 2, Token: "t"}}, Release: []int64{3}},
		{Abandon: []wire.AbandonRequest{{Seq: 2, Token: "t", DelayMS: 5}}, Reject: []wire.RejectRequest{{Seq: 3, Token: "u", Reason: "r"}}},
	} {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.AppendStreamSettle([]byte("x"), l)
		if err != nil || string(got) != "x"+string(want) {
			t.Fatalf("AppendStreamSettle wrote %s, %v; json.Marshal %s", got, err, want)
		}
	}
}

// BenchmarkParseStreamEvent compares ParseStreamEvent with json.Unmarshal
// on the event a stream at a window of one writes per message.
func BenchmarkParseStreamEvent(b *testing.B) {
	now := time.UnixMilli(1_800_000_000_123)
	line, err := wire.AppendStreamEvent(nil, wire.StreamEvent{Messages: []wire.ReceivedMessage{{Queue: "orders", Seq: 123456,
		Body: bytes.Repeat([]byte("a"), 256), DeliveryCount: 1, EnqueuedAt: now, LockToken: "0123456789abcdef0123456789abcdef",
		LockedUntil: now.Add(30 * time.Second), State: "locked"}}, Line: 123455, Results: []wire.ItemResult{{}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ev wire.StreamEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseStreamEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := wire.ParseStreamEvent(line); !ok {
				b.Fatal("not parsed")
			}
		}
	})
}
