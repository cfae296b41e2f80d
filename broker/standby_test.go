package broker_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/broker"
)

func TestStandbyHandler(t *testing.T) {
	t.Parallel()
	h := broker.StandbyHandler()
	tests := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/healthz", http.StatusOK, `"standby"`},
		{"GET", "/readyz", http.StatusServiceUnavailable, `"reason":"standby"`},
		{"POST", "/v1/queues/q/messages", http.StatusServiceUnavailable, `"code":"unavailable"`},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("%d %s, want %d with %s", w.Code, w.Body, tc.status, tc.body)
			}
			if tc.status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1", w.Header().Get("Retry-After"))
			}
		})
	}
}
