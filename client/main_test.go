package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a broker on an httptest server over tb's store and returns its
// URL and an admin key over every queue. The broker is shut down (waiting
// receives end) before the test server closes.
func serve(t testing.TB, tb *testdb.Bundle, cfg broker.Config) (string, string) {
	t.Helper()
	return serveThrough(t, tb, cfg, nil)
}

// serveThrough is serve with the broker's handler wrapped by wrap (nil:
// not wrapped), for a broker that misbehaves on some requests.
func serveThrough(t testing.TB, tb *testdb.Bundle, cfg broker.Config, wrap func(http.Handler) http.Handler) (string, string) {
	t.Helper()
	_, secret, err := keys.Create(context.Background(), tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = tb.Store
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return ts.URL, secret
}

// newClient returns a client of url with key, on the store's fake clock,
// retrying for a short while only.
func newClient(t testing.TB, url, key string, clock mqlite.Clock) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{URL: url, Key: key, Clock: clock, MaxElapsed: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
