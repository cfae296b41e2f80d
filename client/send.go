package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// Send sends msg to queue (or to a topic: every matching subscription gets
// a copy) in its own transaction on the broker, and returns its result: the
// seq, Duplicate for a resend inside the dedup window, and the copies (of
// the queues the key covers). The same MessageID with another body is
// mqlite.ErrDuplicateConflict. A message that outbox.SendOne would refuse
// for its fields (outbox.Message.Validate) is refused here, with the same
// error, before anything is sent. When
// tracing is on (a global tracer provider is set), it adds ctx's trace
// context to the message's properties (traceparent, tracestate), as
// outbox.SendOne does, unless the message has a traceparent of its own.
func (c *Client) Send(ctx context.Context, queue string, msg outbox.Message) (outbox.Result, error) {
	if err := checkQueue(queue); err != nil {
		return outbox.Result{}, err
	}
	if err := msg.Validate(); err != nil {
		return outbox.Result{}, err
	}
	var out wire.SendResult
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/messages"), in: fromOutbox(ctx, msg), out: &out})
	if err != nil {
		return outbox.Result{}, err
	}
	return out.Result(), nil
}

// SendBatch sends msgs to queue in one request and one transaction, as
// outbox.SendBatch: a slot whose MessageID conflicts has its own Err (the
// others are written); an error of the whole batch writes nothing, and an
// invalid message (outbox.Message.Validate) is refused before anything is
// sent. The
// broker bounds the batch (ErrRequestTooLarge). ctx's trace context goes
// along as in Send.
func (c *Client) SendBatch(ctx context.Context, queue string, msgs []outbox.Message) ([]outbox.Result, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	req := wire.SendBatchRequest{Messages: make([]wire.SendMessage, len(msgs))}
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		req.Messages[i] = fromOutbox(ctx, m)
	}
	var out wire.SendBatchResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/messages/batch"), in: req, out: &out}); err != nil {
		return nil, err
	}
	if len(out.Results) != len(msgs) {
		return nil, fmt.Errorf("client: send-batch: %d results for %d messages", len(out.Results), len(msgs))
	}
	res := make([]outbox.Result, len(out.Results))
	for i, r := range out.Results {
		res[i] = r.Result()
	}
	return res, nil
}

// fromOutbox is m on the wire, with ctx's trace context added to its
// properties when tracing is on (a global tracer provider is set).
func fromOutbox(ctx context.Context, m outbox.Message) wire.SendMessage {
	if tracing.Tracer(nil) != nil {
		m.Properties = tracing.Inject(ctx, m.Properties, mqlite.MaxPropertiesBytes)
	}
	return wire.FromOutbox(m)
}
