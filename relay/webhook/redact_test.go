package webhook_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
	"github.com/mqlite/mqlite/relay/webhook"
)

// TestErrorsHideTheURLsSecrets: a webhook URL's path and query carry
// tokens; a failed request's error names the URL, and it lands in the
// message's last error (which consumer keys read) and in the relay's log:
// both show the scheme, host and port only.
func TestErrorsHideTheURLsSecrets(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every request fails
	const pathSecret, querySecret = "T0KEN-in-the-path", "s1gnature-in-the-query"
	sink, err := webhook.New(webhook.Config{URL: "http://" + host + "/hooks/" + pathSecret + "?sig=" + querySecret, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	b := relaytest.Open(t, mqlite.QueueOptions{})
	relaytest.Send(t, b.Store, outbox.Message{Body: []byte("x")})
	var logged testdb.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	obs := relaytest.NewObserver()
	r, err := relay.New(b.Store, relaytest.Queue, sink, relay.Config{Backoff: now, Logger: log, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	stop := relaytest.Start(t, r)
	c := obs.WaitFor(t, "two failed deliveries", func(c relaytest.Counts) bool { return c.Abandoned >= 2 })
	stop()
	msgs, err := b.Store.Peek(context.Background(), relaytest.Queue, mqlite.PeekParams{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("peek: %v %v", msgs, err)
	}
	for _, where := range []struct{ name, text string }{
		{"last_error", msgs[0].LastError},
		{"the abandon's cause", c.Causes[0].Error()},
		{"the log", logged.String()},
	} {
		if strings.Contains(where.text, pathSecret) || strings.Contains(where.text, querySecret) {
			t.Errorf("%s holds the URL's secret: %s", where.name, where.text)
		}
	}
	if want := `"http://` + host + `/REDACTED"`; !strings.Contains(msgs[0].LastError, want) {
		t.Errorf("last_error %q, want the URL shown as %s", msgs[0].LastError, want)
	}
	if !strings.Contains(c.Causes[0].Error(), "connection refused") {
		t.Errorf("cause %v, want the connection refused", c.Causes[0])
	}
}

// TestNewHidesTheURL: New refuses a URL without repeating it.
func TestNewHidesTheURL(t *testing.T) {
	t.Parallel()
	const secret = "T0KEN-in-the-path"
	_, err := webhook.New(webhook.Config{URL: "ftp://127.0.0.1/" + secret, Secrets: secrets})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("New = %v, want a refusal that does not repeat the URL", err)
	}
}
