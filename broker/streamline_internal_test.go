package broker

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mqlite/mqlite/internal/wire"
)

// TestParseCompleteLineCanonical: the lines the client writes to complete
// take the fast path, to the value the strict decoder gives.
func TestParseCompleteLineCanonical(t *testing.T) {
	t.Parallel()
	for _, l := range []wire.StreamSettle{
		{Complete: []wire.LockRequest{{Seq: 1, Token: "0123456789abcdef0123456789abcdef"}}},
		{Complete: []wire.LockRequest{{Seq: 0, Token: ""}, {Seq: -12, Token: "x"}, {Seq: 1<<63 - 1, Token: "~!#$%()*+-./:;=?@[]^_`{|}"}}},
	} {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseCompleteLine(b)
		if !ok || !reflect.DeepEqual(got, l) {
			t.Fatalf("%s: parsed %+v, %v; want %+v", b, got, ok, l)
		}
	}
}

// FuzzParseCompleteLine: a line the fast path accepts, the strict decoder
// accepts with the same value.
func FuzzParseCompleteLine(f *testing.F) {
	for _, s := range []string{
		`{"complete":[{"seq":1,"token":"abc"}]}`,
		`{"complete":[{"seq":1,"token":"abc"},{"seq":2,"token":"d"}]}`,
		`{"complete":[{"seq":01,"token":"abc"}]}`,
		`{"complete":[{"seq":-0,"token":"abc"}]}`,
		`{"complete":[{"seq":99999999999999999999,"token":"abc"}]}`,
		`{"complete":[{"seq":1,"token":"a\"b"}]}`,
		`{"complete":[{"seq":1,"token":"abc"}]} `,
		`{"complete":[{"seq":1,"token":"abc"}],"release":[1]}`,
		`{"complete":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := parseCompleteLine(b)
		if !ok {
			return
		}
		slow, err := decodeBytes[wire.StreamSettle](b)
		if err != nil {
			t.Fatalf("%q: the fast path accepts it, the decoder refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, decoder %+v", b, fast, slow)
		}
	})
}

// BenchmarkCompleteLine compares the fast path with the strict decoder on
// the line a stream's client writes per message.
func BenchmarkCompleteLine(b *testing.B) {
	line := []byte(`{"complete":[{"seq":123456,"token":"0123456789abcdef0123456789abcdef"}]}`)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeBytes[wire.StreamSettle](line); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parseCompleteLine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseCompleteLine(line); !ok {
				b.Fatal("not parsed")
			}
		}
	})
}
