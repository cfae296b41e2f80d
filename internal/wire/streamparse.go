package wire

import (
	"encoding/base64"
	"strconv"
	"time"
)

// ParseStreamEvent decodes a line a stream's broker writes, when it is in
// the form AppendStreamEvent writes without json.Marshal (its fields in
// order, strings of printable ASCII without escapes, times as
// RFC3339Nano writes them, no properties, no error), without reflection.
// It reports false, with the zero event, for any other line, which
// json.Unmarshal reads: a line it accepts decodes there to the same value.
func ParseStreamEvent(b []byte) (StreamEvent, bool) {
	p := lineParser{b: b, ok: true}
	var ev StreamEvent
	p.lit(`{`)
	first := true
	if p.opt(`"messages":[`) {
		first = false
		for p.ok {
			ev.Messages = append(ev.Messages, p.message())
			if !p.opt(`,`) {
				break
			}
		}
		p.lit(`]`)
	}
	if p.field(`"line":`, &first) {
		ev.Line = p.int()
	}
	if p.field(`"results":[`, &first) {
		for p.ok {
			ev.Results = append(ev.Results, p.result())
			if !p.opt(`,`) {
				break
			}
		}
		p.lit(`]`)
	}
	p.lit(`}`)
	if !p.ok || len(p.b) > 0 {
		return StreamEvent{}, false
	}
	return ev, true
}

// lineParser reads b from its start; ok turns false at the first byte it does
// not take, and stays false.
type lineParser struct {
	b  []byte
	ok bool
}

// lit takes s.
func (p *lineParser) lit(s string) {
	if !p.opt(s) {
		p.ok = false
	}
}

// opt takes s if b starts with it.
func (p *lineParser) opt(s string) bool {
	if !p.ok || len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// field takes the name of an optional field of an object, with the comma
// before it unless it is the first.
func (p *lineParser) field(name string, first *bool) bool {
	if !*first {
		name = "," + name
	}
	if p.opt(name) {
		*first = false
		return true
	}
	return false
}

// int takes an integer as JSON writes it.
func (p *lineParser) int() int64 {
	if !p.ok {
		return 0
	}
	n := 0
	if n < len(p.b) && p.b[n] == '-' {
		n++
	}
	digits := n
	for n < len(p.b) && p.b[n] >= '0' && p.b[n] <= '9' {
		n++
	}
	if n == digits || p.b[digits] == '0' && n > digits+1 {
		p.ok = false
		return 0
	}
	v, err := strconv.ParseInt(string(p.b[:n]), 10, 64)
	if err != nil {
		p.ok = false
		return 0
	}
	p.b = p.b[n:]
	return v
}

// raw takes a string of printable ASCII without escapes and returns its
// bytes, without the quotes.
func (p *lineParser) raw() []byte {
	p.lit(`"`)
	if !p.ok {
		return nil
	}
	n := 0
	for n < len(p.b) && p.b[n] >= 0x20 && p.b[n] <= 0x7e && p.b[n] != '"' && p.b[n] != '\\' {
		n++
	}
	if n == len(p.b) || p.b[n] != '"' {
		p.ok = false
		return nil
	}
	s := p.b[:n]
	p.b = p.b[n+1:]
	return s
}

func (p *lineParser) str() string { return string(p.raw()) }

// time takes a time as AppendStreamEvent writes it: RFC3339Nano, which
// writes it back the same.
func (p *lineParser) time() time.Time {
	s := p.raw()
	if !p.ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil || string(t.AppendFormat(make([]byte, 0, 40), time.RFC3339Nano)) != string(s) {
		p.ok = false
	}
	return t
}

// optStr and optTime take an optional field of a message: key is its
// name with the comma before it and the colon after it.
func (p *lineParser) optStr(key string) string {
	if p.opt(key) {
		return p.str()
	}
	return ""
}

func (p *lineParser) optTime(key string) time.Time {
	if p.opt(key) {
		return p.time()
	}
	return time.Time{}
}

func (p *lineParser) message() ReceivedMessage {
	var m ReceivedMessage
	p.lit(`{"queue":`)
	m.Queue = p.str()
	p.lit(`,"seq":`)
	m.Seq = p.int()
	p.lit(`,"body":`)
	if !p.opt(`null`) {
		enc := p.raw()
		if p.ok {
			m.Body = make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
			n, err := base64.StdEncoding.Decode(m.Body, enc)
			if err != nil {
				p.ok = false
			}
			m.Body = m.Body[:n]
		}
	}
	m.MessageID = p.optStr(`,"message_id":`)
	m.GroupID = p.optStr(`,"group_id":`)
	m.Subject = p.optStr(`,"subject":`)
	p.lit(`,"delivery_count":`)
	m.DeliveryCount = int(p.int())
	p.lit(`,"enqueued_at":`)
	m.EnqueuedAt = p.time()
	m.ExpiresAt = p.optTime(`,"expires_at":`)
	m.LockToken = p.optStr(`,"lock_token":`)
	m.LockedUntil = p.optTime(`,"locked_until":`)
	m.State = p.optStr(`,"state":`)
	m.VisibleAt = p.optTime(`,"visible_at":`)
	m.DeadLetterReason = p.optStr(`,"dead_letter_reason":`)
	m.DeadLetterDescription = p.optStr(`,"dead_letter_description":`)
	m.DeadLetteredAt = p.optTime(`,"dead_lettered_at":`)
	m.LastError = p.optStr(`,"last_error":`)
	if p.opt(`,"priority":`) {
		m.Priority = int(p.int())
	}
	p.lit(`}`)
	return m
}

func (p *lineParser) result() ItemResult {
	var r ItemResult
	p.lit(`{`)
	first := true
	if p.field(`"error":{"code":`, &first) {
		var e Error
		e.Code = p.str()
		p.lit(`,"reason":`)
		e.Reason = p.str()
		p.lit(`,"message":`)
		e.Message = p.str()
		p.lit(`}`)
		r.Error = &e
	}
	if p.field(`"locked_until":`, &first) {
		r.LockedUntil = p.time()
	}
	p.lit(`}`)
	return r
}
