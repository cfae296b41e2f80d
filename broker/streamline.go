package broker

import (
	"bytes"
	"strconv"

	"github.com/mqlite/mqlite/internal/wire"
)

// parseCompleteLine decodes the line a stream's client writes per message,
// the completes of json.Marshal's form and nothing else
// ({"complete":[{"seq":1,"token":"…"},…]}, tokens of printable ASCII
// without escapes), without reflection. It reports false for any other
// line, which the strict decoder (decode) reads: a line it accepts decodes
// there to the same value.
func parseCompleteLine(b []byte) (wire.StreamSettle, bool) {
	var v wire.StreamSettle
	rest, ok := bytes.CutPrefix(b, []byte(`{"complete":[`))
	if !ok {
		return v, false
	}
	for {
		if rest, ok = bytes.CutPrefix(rest, []byte(`{"seq":`)); !ok {
			return v, false
		}
		n := 0
		if n < len(rest) && rest[n] == '-' {
			n++
		}
		digits := n
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == digits || rest[digits] == '0' && n > digits+1 { // none, or a leading zero
			return v, false
		}
		seq, err := strconv.ParseInt(string(rest[:n]), 10, 64)
		if err != nil {
			return v, false
		}
		if rest, ok = bytes.CutPrefix(rest[n:], []byte(`,"token":"`)); !ok {
			return v, false
		}
		n = 0
		for n < len(rest) && rest[n] >= 0x20 && rest[n] <= 0x7e && rest[n] != '"' && rest[n] != '\\' {
			n++
		}
		if n == len(rest) || rest[n] != '"' {
			return v, false
		}
		v.Complete = append(v.Complete, wire.LockRequest{Seq: seq, Token: string(rest[:n])})
		rest = rest[n+1:]
		if len(rest) >= 2 && rest[0] == '}' && rest[1] == ',' {
			rest = rest[2:]
			continue
		}
		return v, string(rest) == "}]}"
	}
}
