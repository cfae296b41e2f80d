package wire

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"
)

// StreamSettle is one line a client writes on a stream (POST
// /v1/queues/{queue}/stream, newline-delimited JSON both ways): the
// settlements of deliveries the stream handed out, and the seqs to
// release (deliveries the client gives up on without settling, such as a
// lease it lost), each of which frees a place in the window. The broker
// answers each line with one StreamEvent whose Line is its number.
type StreamSettle struct {
	Complete []LockRequest    `json:"complete,omitempty"`
	Abandon  []AbandonRequest `json:"abandon,omitempty"`
	Reject   []RejectRequest  `json:"reject,omitempty"`
	Release  []int64          `json:"release,omitempty"`
}

// Items is how many settlements and releases the line carries.
func (s StreamSettle) Items() int {
	return len(s.Complete) + len(s.Abandon) + len(s.Reject) + len(s.Release)
}

// StreamEvent is one line the broker writes on a stream: messages handed
// out, the results of the client's line number Line (one per settlement,
// completes then abandons then rejects, in order), or the error that ends
// the stream.
type StreamEvent struct {
	Messages []ReceivedMessage `json:"messages,omitempty"`
	Line     int64             `json:"line,omitempty"`
	Results  []ItemResult      `json:"results,omitempty"`
	Error    *Error            `json:"error,omitempty"`
}

// AppendStreamEvent appends ev as one line, without its line end, to b: the
// bytes json.Marshal gives, written without reflection for the shapes a
// stream sends per message (its messages and the results of its lines).
// A value outside those shapes (a time json cannot write, a string with a
// character JSON escapes) is written by json.Marshal.
func AppendStreamEvent(b []byte, ev StreamEvent) ([]byte, error) {
	start := len(b)
	b = append(b, '{')
	if len(ev.Messages) > 0 {
		b = append(b, `"messages":[`...)
		for i, m := range ev.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendMessage(b, m); !ok {
				return appendMarshal(b[:start], ev)
			}
		}
		b = append(b, ']')
	}
	if ev.Line != 0 {
		b = appendComma(b, start)
		b = strconv.AppendInt(append(b, `"line":`...), ev.Line, 10)
	}
	if len(ev.Results) > 0 {
		b = appendComma(b, start)
		b = append(b, `"results":[`...)
		for i, r := range ev.Results {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendItemResult(b, r); !ok {
				return appendMarshal(b[:start], ev)
			}
		}
		b = append(b, ']')
	}
	if ev.Error != nil {
		b = appendComma(b, start)
		var ok bool
		if b, ok = appendError(append(b, `"error":`...), *ev.Error); !ok {
			return appendMarshal(b[:start], ev)
		}
	}
	return append(b, '}'), nil
}

// appendMarshal appends json.Marshal's encoding of v to b.
func appendMarshal(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

// appendComma appends the comma between two fields of the object that
// starts at b[start].
func appendComma(b []byte, start int) []byte {
	if len(b) > start+1 {
		return append(b, ',')
	}
	return b
}

// appendMessage appends m as json.Marshal does, or reports false for a
// value it leaves to json.Marshal (a message with a history of failed
// deliveries among them: rare, and its line is read by json.Unmarshal).
func appendMessage(b []byte, m ReceivedMessage) ([]byte, bool) {
	if len(m.Attempts) > 0 {
		return b, false
	}
	ok := true
	str := func(name, v string, omitEmpty bool) {
		if !ok || omitEmpty && v == "" {
			return
		}
		b = append(append(append(b, ',', '"'), name...), '"', ':')
		b, ok = appendString(b, v)
	}
	tm := func(name string, v time.Time, omitZero bool) {
		if !ok || omitZero && v.IsZero() {
			return
		}
		b = append(append(append(b, ',', '"'), name...), '"', ':')
		b, ok = appendTime(b, v)
	}
	b = append(b, `{"queue":`...)
	b, ok = appendString(b, m.Queue)
	b = strconv.AppendInt(append(b, `,"seq":`...), m.Seq, 10)
	b = append(b, `,"body":`...)
	if m.Body == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, m.Body)
		b = append(b, '"')
	}
	str("message_id", m.MessageID, true)
	str("group_id", m.GroupID, true)
	str("subject", m.Subject, true)
	if len(m.Properties) > 0 && ok {
		b = append(b, `,"properties":{`...)
		for i, k := range slices.Sorted(maps.Keys(m.Properties)) {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendString(b, k); !ok {
				return b, false
			}
			b = append(b, ':')
			if b, ok = appendString(b, m.Properties[k]); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	b = strconv.AppendInt(append(b, `,"delivery_count":`...), int64(m.DeliveryCount), 10)
	tm("enqueued_at", m.EnqueuedAt, false)
	tm("expires_at", m.ExpiresAt, true)
	str("lock_token", m.LockToken, true)
	tm("locked_until", m.LockedUntil, true)
	str("state", m.State, true)
	tm("visible_at", m.VisibleAt, true)
	str("dead_letter_reason", m.DeadLetterReason, true)
	str("dead_letter_description", m.DeadLetterDescription, true)
	tm("dead_lettered_at", m.DeadLetteredAt, true)
	str("last_error", m.LastError, true)
	if m.Priority != 0 {
		b = strconv.AppendInt(append(b, `,"priority":`...), int64(m.Priority), 10)
	}
	return append(b, '}'), ok
}

// appendItemResult appends r as json.Marshal does, or reports false.
func appendItemResult(b []byte, r ItemResult) ([]byte, bool) {
	ok := true
	b = append(b, '{')
	if r.Error != nil {
		if b, ok = appendError(append(b, `"error":`...), *r.Error); !ok {
			return b, false
		}
	}
	if !r.LockedUntil.IsZero() {
		if r.Error != nil {
			b = append(b, ',')
		}
		if b, ok = appendTime(append(b, `"locked_until":`...), r.LockedUntil); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendError appends e as json.Marshal does, or reports false.
func appendError(b []byte, e Error) ([]byte, bool) {
	ok1, ok2, ok3 := false, false, false
	b, ok1 = appendString(append(b, `{"code":`...), e.Code)
	b, ok2 = appendString(append(b, `,"reason":`...), e.Reason)
	b, ok3 = appendString(append(b, `,"message":`...), e.Message)
	return append(b, '}'), ok1 && ok2 && ok3
}

// appendString appends s quoted, or reports false for a string that holds
// a byte JSON escapes (json.Marshal also escapes <, > and &) or any byte
// outside printable ASCII.
func appendString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	return append(append(append(b, '"'), s...), '"'), true
}

// appendTime appends t as its MarshalJSON does (RFC 3339 with nanoseconds),
// or reports false for a time it refuses or may write otherwise (a year
// outside 0 to 9999, an offset that is not whole minutes).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off%60 != 0 || off <= -24*3600 || off >= 24*3600 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// AppendStreamSettle appends l as one line, without its line end, to b:
// the bytes json.Marshal gives, written without reflection for a line of
// completes only (the one a consumer writes per message).
func AppendStreamSettle(b []byte, l StreamSettle) ([]byte, error) {
	if len(l.Complete) == 0 || len(l.Abandon)+len(l.Reject)+len(l.Release) > 0 {
		return appendMarshal(b, l)
	}
	start := len(b)
	b = append(b, `{"complete":[`...)
	for i, c := range l.Complete {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, `{"seq":`...), c.Seq, 10)
		var ok bool
		if b, ok = appendString(append(b, `,"token":`...), c.Token); !ok {
			return appendMarshal(b[:start], l)
		}
		b = append(b, '}')
	}
	return append(b, ']', '}'), nil
}
