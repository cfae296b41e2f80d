package driver

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The bounds of a message's history of failed deliveries (Row.Attempts).
const (
	// DefaultAttemptHistory is how many failed deliveries a message keeps
	// when the store's configuration names none.
	DefaultAttemptHistory = 10
	// MaxAttemptHistory is the most a store may keep per message.
	MaxAttemptHistory = 100
	// MaxWorkerLen bounds an attempt's worker, in bytes: a longer one is
	// cut at a rune boundary.
	MaxWorkerLen = 256
	// MaxAttemptErrorLen bounds an attempt's error, in bytes (the bound of
	// an Abandon's reason, which mqlite exports as MaxLastErrorLen); a
	// longer one is cut at a rune boundary.
	MaxAttemptErrorLen = 1024
)

// Attempt is one failed delivery of a message: when it came back (epoch
// milliseconds), why, and who held it. Its JSON is the element of the
// history every engine stores: {"at": ms, "error": text, "worker": text}.
type Attempt struct {
	At     int64  `json:"at"`
	Error  string `json:"error"`
	Worker string `json:"worker"`
}

// AppendAttempt returns the stored history history (JSON, "" for none)
// with a appended, keeping only the last n attempts, oldest first. n <= 0
// records nothing: history comes back as it is. A history that does not
// parse is an error (the engine leaves the row as it was).
func AppendAttempt(history string, a Attempt, n int) (string, error) {
	if n <= 0 {
		return history, nil
	}
	var all []json.RawMessage
	if history != "" {
		if err := json.Unmarshal([]byte(history), &all); err != nil {
			return "", fmt.Errorf("attempts: %w", err)
		}
	}
	a.Error, a.Worker = Cut(a.Error, MaxAttemptErrorLen), Cut(a.Worker, MaxWorkerLen)
	one, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("attempts: %w", err)
	}
	all = append(all, one)
	if len(all) > n {
		all = all[len(all)-n:]
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range all {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(x)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// ParseAttempts decodes a stored history ("" for none: nil).
func ParseAttempts(history string) ([]Attempt, error) {
	if history == "" {
		return nil, nil
	}
	var out []Attempt
	if err := json.Unmarshal([]byte(history), &out); err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	return out, nil
}

// Cut returns s cut to at most n bytes, at a rune boundary, and made valid
// UTF-8.
func Cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// The errors of the attempts an engine records on its own: a lease that
// lapsed (the reaper's, or a claim's that found it), and a lease an
// earlier process left (Recover). Their worker is "": the store does not
// record who holds a lease.
const (
	AttemptLeaseExpired = "the lease expired"
	AttemptRecovered    = "the process holding the delivery ended"
)

// AttemptRequest names the options of a Receive that a replay of its
// attempt id must repeat: what a receive attempt records beside its result.
func AttemptRequest(r ClaimRequest) string {
	mode := "peek-lock"
	if r.Delete {
		mode = "receive-and-delete"
	}
	return fmt.Sprintf("max=%d mode=%s", r.Max, mode)
}

// KeepHeld is what a replayed attempt hands out of the rows it recorded:
// those still held under their lease, held giving each one's lease end as
// it is now (renewals since count), in the recorded order. It reuses rows.
func KeepHeld(rows []Row, held map[int64]int64) []Row {
	kept := rows[:0]
	for _, m := range rows {
		if until, ok := held[m.Seq]; ok {
			m.LockedUntil = until
			kept = append(kept, m)
		}
	}
	return kept
}
