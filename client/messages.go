package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/tracing"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// Receive claims up to opts.Max messages of queue, as Store.Receive: with
// opts.Wait it long-polls (the broker caps the wait). Without an AttemptID
// one is generated for this call, so its retries replay rather than claim
// again. Cancelling ctx ends the wait with ctx's error.
func (c *Client) Receive(ctx context.Context, queue string, opts mqlite.ReceiveOptions) ([]mqlite.Message, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if opts.Wait < 0 {
		return nil, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative wait"}
	}
	if opts.AttemptID == "" {
		opts.AttemptID = newAttemptID()
	}
	var out wire.MessagesResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/receive"),
		in: wire.FromReceiveOptions(opts), out: &out, wait: max(opts.Wait, 0)})
	if err != nil {
		return nil, err
	}
	return wire.Messages(out.Messages), nil
}

// checkQueue refuses an empty queue name here: it cannot be a path segment.
func checkQueue(queue string) error {
	if queue == "" {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidQueueName, Detail: "empty queue name"}
	}
	return nil
}

func lockOf(l mqlite.Lock) wire.LockRequest { return wire.LockRequest{Seq: l.Seq, Token: l.Token} }

// Complete settles a delivered message as handled, as Store.Complete.
func (c *Client) Complete(ctx context.Context, l mqlite.Lock) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/complete"), in: lockOf(l)})
}

// lockBatch sends locks to the batch endpoint op ("complete-batch",
// "renew-batch"), one request per queue (one commit each), and hands each
// lock's result, by the lock's index in locks, to each. err is the failure
// of a whole request.
func (c *Client) lockBatch(ctx context.Context, locks []mqlite.Lock, op string, each func(i int, r wire.ItemResult)) error {
	byQueue := make(map[string][]int)
	for i, l := range locks {
		byQueue[l.Queue] = append(byQueue[l.Queue], i)
	}
	for queue, idx := range byQueue {
		if err := checkQueue(queue); err != nil {
			return err
		}
		req := wire.LocksRequest{Locks: make([]wire.LockRequest, len(idx))}
		for j, i := range idx {
			req.Locks[j] = lockOf(locks[i])
		}
		var out wire.ResultsResponse
		if err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/"+op), in: req, out: &out}); err != nil {
			return err
		}
		if len(out.Results) != len(idx) {
			return fmt.Errorf("client: %s: %d results for %d locks", op, len(out.Results), len(idx))
		}
		for j, i := range idx {
			each(i, out.Results[j])
		}
	}
	return nil
}

// CompleteAndReceive completes locks, all of queue, and claims the next
// messages of queue in one request and one commit, as
// Store.CompleteAndReceive: a consumer that handles one message at a time
// pays one round trip per message. Each lock gets its own result; with
// opts.Wait it long-polls once the completions committed. Without an
// AttemptID one is generated for this call, so that its retries replay the
// claim (and the completions answer from their receipts).
func (c *Client) CompleteAndReceive(ctx context.Context, queue string, locks []mqlite.Lock, opts mqlite.ReceiveOptions) ([]error, []mqlite.Message, error) {
	if err := checkQueue(queue); err != nil {
		return nil, nil, err
	}
	if opts.Wait < 0 {
		return nil, nil, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative wait"}
	}
	req := wire.CompleteReceiveRequest{Complete: make([]wire.LockRequest, len(locks))}
	for i, l := range locks {
		if l.Queue != queue {
			return nil, nil, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
				Detail: fmt.Sprintf("a lock of queue %q in a call on %q", l.Queue, queue)}
		}
		req.Complete[i] = lockOf(l)
	}
	if opts.AttemptID == "" {
		opts.AttemptID = newAttemptID()
	}
	req.Receive = wire.FromReceiveOptions(opts)
	var out wire.CompleteReceiveResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/complete-receive"),
		in: req, out: &out, wait: max(opts.Wait, 0)})
	if err != nil {
		return nil, nil, err
	}
	if len(out.Results) != len(locks) {
		return nil, nil, fmt.Errorf("client: complete-receive: %d results for %d locks", len(out.Results), len(locks))
	}
	errs := make([]error, len(locks))
	for i, r := range out.Results {
		errs[i] = r.Error.Err()
	}
	return errs, wire.Messages(out.Messages), nil
}

// CompleteBatch completes several deliveries, one request per queue (one
// commit each). Each lock gets its own result; err is for the failure of a
// whole request.
func (c *Client) CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error) {
	errs := make([]error, len(locks))
	if err := c.lockBatch(ctx, locks, "complete-batch", func(i int, r wire.ItemResult) { errs[i] = r.Error.Err() }); err != nil {
		return nil, err
	}
	return errs, nil
}

// Abandon gives a delivered message back, claimable after delay, as
// Store.Abandon. The delay travels in milliseconds.
func (c *Client) Abandon(ctx context.Context, l mqlite.Lock, delay time.Duration) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	if delay < 0 {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative delay"}
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/abandon"),
		in: wire.AbandonRequest{Seq: l.Seq, Token: l.Token, DelayMS: delay.Milliseconds()}})
}

// AbandonWithReason is Abandon that keeps reason with the message as its
// last error, as Store.AbandonWithReason.
func (c *Client) AbandonWithReason(ctx context.Context, l mqlite.Lock, delay time.Duration, reason string) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	if delay < 0 {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative delay"}
	}
	if !utf8.ValidString(reason) {
		// JSON would carry it as U+FFFD: refused here, as the store would.
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "abandon reason is not UTF-8"}
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/abandon"),
		in: wire.AbandonRequest{Seq: l.Seq, Token: l.Token, DelayMS: delay.Milliseconds(), Reason: reason}})
}

// Release gives back a delivery its holder never started, as
// Store.Release: ready again at once, the delivery not counted toward
// MaxDeliveryCount; fenced like Abandon. A retry after a lost reply
// replays from the release's receipt. Loop, LoopTx and LoopBatch over the
// client release through it the messages they claimed ahead and never
// started when they stop (consumer.Releaser).
func (c *Client) Release(ctx context.Context, l mqlite.Lock) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/release"), in: lockOf(l)})
}

// Reject dead-letters a delivered message, as Store.Reject.
func (c *Client) Reject(ctx context.Context, l mqlite.Lock, reason, description string) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/reject"),
		in: wire.RejectRequest{Seq: l.Seq, Token: l.Token, Reason: reason, Description: description}})
}

// Defer sets a delivered message aside, as Store.Defer.
func (c *Client) Defer(ctx context.Context, l mqlite.Lock) error {
	if err := checkQueue(l.Queue); err != nil {
		return err
	}
	return c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/defer"), in: lockOf(l)})
}

// ReceiveDeferred locks the deferred message seq, as Store.ReceiveDeferred.
// A retry after a lost reply finds the message locked and gets
// mqlite.ErrMessageNotFound; the lease then lapses and the message comes back.
func (c *Client) ReceiveDeferred(ctx context.Context, queue string, seq int64) (mqlite.Message, error) {
	if err := checkQueue(queue); err != nil {
		return mqlite.Message{}, err
	}
	var out wire.MessageResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/receive-deferred"), in: wire.SeqRequest{Seq: seq}, out: &out})
	if err != nil {
		return mqlite.Message{}, err
	}
	return out.Message.Message(), nil
}

// Renew extends a running lease, as Store.Renew.
func (c *Client) Renew(ctx context.Context, l mqlite.Lock) (time.Time, error) {
	if err := checkQueue(l.Queue); err != nil {
		return time.Time{}, err
	}
	var out wire.RenewResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: qpath(l.Queue, "/renew"), in: lockOf(l), out: &out}); err != nil {
		return time.Time{}, err
	}
	return out.LockedUntil, nil
}

// RenewBatch renews several leases, one request per queue.
func (c *Client) RenewBatch(ctx context.Context, locks []mqlite.Lock) ([]mqlite.RenewResult, error) {
	res := make([]mqlite.RenewResult, len(locks))
	err := c.lockBatch(ctx, locks, "renew-batch", func(i int, r wire.ItemResult) {
		res[i] = mqlite.RenewResult{LockedUntil: r.LockedUntil, Err: r.Error.Err()}
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func peekQuery(opts mqlite.PeekParams) string {
	v := url.Values{}
	if opts.FromSeq != 0 {
		v.Set("from_seq", fmt.Sprint(opts.FromSeq))
	}
	if opts.Max != 0 {
		v.Set("max", fmt.Sprint(opts.Max))
	}
	if opts.MaxBytes != 0 {
		v.Set("max_bytes", fmt.Sprint(opts.MaxBytes))
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Peek reads messages of queue without locking them, as Store.Peek.
func (c *Client) Peek(ctx context.Context, queue string, opts mqlite.PeekParams) ([]mqlite.Message, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var out wire.MessagesResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: qpath(queue, "/messages"+peekQuery(opts)), out: &out}); err != nil {
		return nil, err
	}
	return wire.Messages(out.Messages), nil
}

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

// DeliverNow makes scheduled messages of queue due now, as
// Store.DeliverNow. Needs an admin key over the queue; at most the broker's
// batch limit of seqs (ErrRequestTooLarge).
func (c *Client) DeliverNow(ctx context.Context, queue string, opts mqlite.DeliverNowOptions) (int, error) {
	var out wire.CountResponse
	err := c.do(ctx, call{method: http.MethodPost, path: qpath(queue, "/deliver-now"), in: wire.DeliverNowRequest{Seqs: opts.Seqs}, out: &out})
	return out.Count, err
}
