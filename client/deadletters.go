package client

import (
	"context"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// PeekDeadLetters returns the dead letters of queue, as
// Store.PeekDeadLetters. Needs an admin key.
func (c *Client) PeekDeadLetters(ctx context.Context, queue string, opts mqlite.PeekParams) ([]mqlite.Message, error) {
	var out wire.MessagesResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: qpath(queue, "/dead-letters"+peekQuery(opts)), out: &out}); err != nil {
		return nil, err
	}
	return wire.Messages(out.Messages), nil
}

// Redrive puts dead letters of queue back to active, as Store.Redrive.
func (c *Client) Redrive(ctx context.Context, queue string, opts mqlite.RedriveOptions) (int, error) {
	var out wire.CountResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/dead-letters/redrive"), in: wire.RedriveRequest{Seqs: opts.Seqs}, out: &out})
	return out.Count, err
}
