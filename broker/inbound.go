package broker

import (
	"context"
	"errors"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
)

// inboundPattern is the route of the signed webhooks of Config.Inbound:
// open to any caller, the signature being the authentication.
const inboundPattern = "POST /v1/inbound/{source}"

// newInbound builds the handler of cfg.Inbound (none: every request to the
// route is refused as an unknown sender). It reads each sender's queue.
// A refusal of its Config is the broker's ErrInvalidConfig, its text said once:
// "broker: invalid config: Inbound source ..." (the error texts keep
// their word).
func newInbound(cfg Config) (*inbound.Handler, error) {
	h, err := inbound.New(context.Background(), cfg.Store, inbound.Config{Senders: cfg.Inbound, Logger: cfg.Logger, MaxHeldBytes: cfg.MaxInboundBytes})
	var ia *mqlite.InvalidArgumentError
	if errors.Is(err, inbound.ErrInvalidConfig) && errors.As(err, &ia) {
		return nil, configErr("Inbound %s", ia.Detail)
	}
	return h, err
}

// mountInbound serves the inbound route, outside the key check.
func (s *Server) mountInbound(mux *http.ServeMux) {
	mux.Handle(inboundPattern, s.inbound)
}
