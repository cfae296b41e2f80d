package broker

import (
	"net/http"

	"github.com/mqlite/mqlite/internal/wire"
)

// StandbyHandler returns the handler a hot standby serves while its Open
// waits for the file lock (mqlite.Config.WaitForLock; `mqlite serve
// --standby`): /healthz answers 200 {"status":"standby"}, because the
// process is alive, and /readyz and every other path 503 unavailable with
// reason "standby" and Retry-After: 1, so that a load balancer routes to the
// primary and a client retries until the standby has taken over. It is safe
// for concurrent use.
func StandbyHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, wire.Health{Status: "standby"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, wire.ErrorResponse{Error: wire.Error{
			Code: wire.CodeUnavailable, Reason: wire.ReasonStandby,
			Message: "standby: waiting for the primary to release the file",
		}})
	})
	return mux
}
