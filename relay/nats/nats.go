// Package nats is a relay.Sink that publishes to NATS JetStream, and a
// relay.Source (NewSource) that reads a JetStream durable pull consumer
// into a queue through relay.Intake.
//
// Each message is published asynchronously with the Nats-Msg-Id header set
// to relay.ID, the same on every retry, so that the stream drops a
// duplicate that arrives inside its duplicate window. A message is reported
// delivered only once its PubAck has come back; a publish error, a missing
// PubAck (Config.AckTimeout) or a lost connection is retried. A publish
// that no stream answers (no stream matches the subject) is held
// (relay.Hold): the relay keeps the messages and tries again, so that a
// stream created late, or deleted by mistake, costs no delivery and no
// dead letter.
//
// The stream's duplicate window (StreamConfig.Duplicates, 2 minutes unless
// set) must cover the relay's longest retry: a message whose PubAck was lost
// and that is retried after the window passed is stored twice. Set the
// window to more than the queue's LockDuration plus the relay's
// Backoff.Max.
//
// The subject comes from a text/template over the message (see Subject);
// the message's seq, delivery count, subject and group travel as Mqlite-*
// headers and its properties as headers of their own names (but those that
// start with "Nats-", or cannot be a header).
package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/tracing"
	"github.com/mqlite/mqlite/relay"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultSubject     = "{{.Queue}}"
	DefaultMaxInFlight = 1024
	DefaultAckTimeout  = 10 * time.Second
)

// ErrInvalidConfig is matched, together with mqlite.ErrInvalidArgument, by
// every error of New.
var ErrInvalidConfig = errors.New("nats: invalid config")

// Config configures a Sink. Zero values mean the defaults.
type Config struct {
	// JetStream publishes the messages. Required. Create it with
	// jetstream.WithPublishAsyncTimeout, so that a publish lost with its
	// connection does not stay pending, and on a connection that
	// reconnects for ever (nats.MaxReconnects(-1)).
	JetStream jetstream.JetStream
	// Subject is a relay.Template that names each message's NATS
	// subject, such as "orders.{{.Subject}}". Defaults to "{{.Queue}}". A message whose
	// subject renders empty, with a space or an empty token ("orders."
	// for a message without a Subject) is held (relay.Unrenderable): the
	// template is the operator's to fix, so no dead letter records it.
	Subject string
	// MaxInFlight bounds the publishes awaiting their PubAck, over every
	// Send. Defaults to 1024.
	MaxInFlight int
	// AckTimeout is how long a publish may wait for its PubAck before the
	// message is retried. Defaults to 10s.
	AckTimeout time.Duration
}

// Sink publishes messages to JetStream. It is safe for concurrent use.
type Sink struct {
	cfg   Config
	subj  *relay.Template
	slots chan struct{}
}

var _ relay.Sink = (*Sink)(nil)

// New returns a Sink for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and sends nothing.
func New(cfg Config) (*Sink, error) {
	if cfg.JetStream == nil {
		return nil, invalid("nil JetStream")
	}
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
	}
	subj, err := relay.ParseTemplate(cfg.Subject)
	if err != nil {
		return nil, invalid("Subject: %v", err)
	}
	if cfg.MaxInFlight, err = setting.Default("MaxInFlight", cfg.MaxInFlight, DefaultMaxInFlight); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.AckTimeout, err = setting.Default("AckTimeout", cfg.AckTimeout, DefaultAckTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	return &Sink{cfg: cfg, subj: subj, slots: make(chan struct{}, cfg.MaxInFlight)}, nil
}

// Send publishes msgs asynchronously, up to Config.MaxInFlight awaiting
// their PubAck at once, and waits for each PubAck. Cancelling ctx stops
// waiting: the messages not yet acknowledged are retried.
func (s *Sink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		subject, err := s.subject(m)
		if err != nil {
			out[i] = relay.Unrenderable(fmt.Errorf("nats: subject: %w", err))
			continue
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			out[i] = relay.RetryAfter(fmt.Errorf("nats: %w", ctx.Err()), 0)
			continue
		}
		f, err := s.cfg.JetStream.PublishMsgAsync(message(m, subject), jetstream.WithMsgID(relay.ID(m)))
		if err != nil {
			<-s.slots
			out[i] = failed(err)
			continue
		}
		futures[i] = f
	}
	timer := time.NewTimer(s.cfg.AckTimeout)
	defer timer.Stop()
	for i, f := range futures {
		if f == nil {
			continue
		}
		out[i] = s.await(ctx, f, timer.C)
		<-s.slots
	}
	return out
}

// await waits for one PubAck.
func (s *Sink) await(ctx context.Context, f jetstream.PubAckFuture, timeout <-chan time.Time) relay.Outcome {
	select {
	case <-f.Ok():
		return relay.Delivered()
	case err := <-f.Err():
		return failed(err)
	case <-timeout:
		return relay.RetryAfter(fmt.Errorf("nats: no PubAck within %v", s.cfg.AckTimeout), 0)
	case <-ctx.Done():
		return relay.RetryAfter(fmt.Errorf("nats: %w", ctx.Err()), 0)
	}
}

// ErrNoStream is the cause of a hold: no stream answered for the
// message's subject.
var ErrNoStream = errors.New("nats: no stream answered for the subject (none matches it, or it has no leader)")

// failed classifies a publish error: a message over the server's max
// payload is dead-lettered; a publish that no stream answered is held
// (relay.Hold: a stream not created yet, or deleted, must not push the
// backlog into the dead letters); anything else is retried.
func failed(err error) relay.Outcome {
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return relay.DeadLetter("nats: message too large", err.Error())
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return relay.Hold("no_stream", fmt.Errorf("%w: %w", ErrNoStream, err))
	}
	return relay.RetryAfter(fmt.Errorf("nats: publish: %w", err), 0)
}

// subject renders m's subject.
func (s *Sink) subject(m mqlite.Message) (string, error) {
	subject, err := s.subj.Render(m)
	if err != nil {
		return "", err
	}
	if subject == "" || strings.ContainsAny(subject, " \t\r\n") || strings.HasPrefix(subject, ".") ||
		strings.HasSuffix(subject, ".") || strings.Contains(subject, "..") {
		return "", fmt.Errorf("subject %q is not a valid NATS subject", subject)
	}
	return subject, nil
}

// message builds the NATS message of m.
func message(m mqlite.Message, subject string) *natsgo.Msg {
	h := natsgo.Header{}
	for k, v := range m.Properties {
		if headerOK(k, v) {
			h[k] = []string{v}
		}
	}
	delete(h, tracing.Traceparent) // passed on below, checked
	delete(h, tracing.Tracestate)
	relay.TraceContext(m, func(k, v string) { h[k] = []string{v} })
	h[relay.HeaderQueue] = []string{m.Queue}
	h[relay.HeaderSeq] = []string{strconv.FormatInt(m.Seq, 10)}
	h[relay.HeaderDeliveryCount] = []string{strconv.Itoa(m.DeliveryCount)}
	if m.Subject != "" {
		h[relay.HeaderSubject] = []string{m.Subject}
	}
	if m.GroupID != "" {
		h[relay.HeaderGroupID] = []string{m.GroupID}
	}
	return &natsgo.Msg{Subject: subject, Data: m.Body, Header: h}
}

// headerOK reports whether property k=v can travel as a header: a key
// without spaces, colons or control bytes that does not start with "Nats-"
// (the server's own headers, such as Nats-Msg-Id, are not the message's to
// set), and a value on one line.
func headerOK(k, v string) bool {
	if k == "" || len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
		return false
	}
	return !strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == ':' || r == 0x7f }) &&
		!strings.ContainsAny(v, "\r\n")
}

func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}
