// Package wire is the broker's HTTP/JSON vocabulary, shared by the broker
// (broker/) and its Go client (client/): the request and response bodies,
// their conversions to and from the root package's types, and the table that
// maps each root sentinel error to a stable code, a reason and an HTTP status.
//
// Durations travel as integer milliseconds (fields ending in _ms), the
// store's own resolution; -1 keeps its meaning of "off" or "no bound".
// Times travel as RFC 3339 strings and bodies as base64 (encoding/json's
// []byte). docs/api-reference-broker.md documents every body.
package wire

import "time"

// DurMS encodes d as milliseconds; -1 (the "off" value) stays -1.
func DurMS(d time.Duration) int64 {
	if d == -1 {
		return -1
	}
	return d.Milliseconds()
}

// MSDur decodes milliseconds: -1 stays -1, the "off" value of every
// duration option; any other negative value stays negative, for the store
// to refuse (a broker refuses bad input, it never rewrites it into a value
// that means something).
func MSDur(ms int64) time.Duration {
	const most = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case ms == -1:
		return -1
	case ms < -most:
		return time.Duration(-1 << 63)
	}
	if ms > most {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

// Health is the response of /healthz and /readyz.
type Health struct {
	Status string `json:"status"`
}

// Quote quotes s for an error message, cut after 64 bytes.
func Quote(s string) string { return quote(s) }

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + s + `"`
}

// ClientHeader names the client instance that sends a request (the Go
// client sets it to a random name per Client), so that the broker counts
// two processes of one key and host as two receivers.
const ClientHeader = "Mqlite-Client"

// MaxClientNameLen bounds the value of ClientHeader.
const MaxClientNameLen = 64

// ValidClientName reports whether name is a ClientHeader value the broker
// takes: empty (none sent), or 1 to MaxClientNameLen ASCII letters,
// digits, '-', '_' or '.'.
func ValidClientName(name string) bool {
	if len(name) > MaxClientNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
