// Package brokertest starts brokers for tests: the broker's own and the
// dashboard's browser test (a module of its own, so it cannot share the
// broker's test files).
package brokertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mqlite/mqlite/broker"
)

// Serve starts a broker for cfg on an httptest server, its handler wrapped
// by wrap when wrap is not nil, and returns the server's URL. When the test
// ends it shuts the broker down (failing the test if that fails) and closes
// the server.
func Serve(t testing.TB, cfg broker.Config, wrap func(http.Handler) http.Handler) string {
	t.Helper()
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
			t.Error(err)
		}
		ts.Close()
	})
	return ts.URL
}
