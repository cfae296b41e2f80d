package testdb

import (
	"context"
	"log/slog"
	"sync"
)

// Logs is a slog.Handler that keeps the message of every record at or
// above WARN, for tests that count what a loop or a relay told its
// operator. It is safe for concurrent use.
type Logs struct {
	mu   sync.Mutex
	msgs []string
}

// Logger returns a logger that writes to l.
func (l *Logs) Logger() *slog.Logger { return slog.New(l) }

// Enabled keeps WARN and above.
func (l *Logs) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

// Handle keeps r's message.
func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

// WithAttrs returns l: the attributes are not kept.
func (l *Logs) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l.
func (l *Logs) WithGroup(string) slog.Handler { return l }

// Messages returns the messages kept so far.
func (l *Logs) Messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}
