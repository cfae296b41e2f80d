package broker

import (
	"context"
	"net"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// receiverCtx returns r's context tagged with the remote receiver that
// sends it (mqlite.WithReceiver): the key's id, the remote host and the
// client instance the request names in wire.ClientHeader. A malformed
// instance name is refused, never trimmed.
func receiverCtx(r *http.Request) (context.Context, error) {
	name := r.Header.Get(wire.ClientHeader)
	if !wire.ValidClientName(name) {
		return nil, errMalformed("%s: want 1 to %d letters, digits, '-', '_' or '.'", wire.ClientHeader, wire.MaxClientNameLen)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	tag := mqlite.ReceiverTag{Name: name, KeyID: keyOf(r.Context()).ID, Addr: host}
	return mqlite.WithReceiver(r.Context(), tag), nil
}

// workerCtx returns r's context tagged as receiverCtx tags it, for the
// worker an abandon or a reject records in the message's history
// (mqlite.WorkerOf: the client's instance at its host); r's own context
// when the request names no valid instance, which a settlement does not
// need.
func workerCtx(r *http.Request) context.Context {
	if ctx, err := receiverCtx(r); err == nil {
		return ctx
	}
	return r.Context()
}
