package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// DefaultSourceAckWait is SourceConfig.AckWait's default.
const DefaultSourceAckWait = 30 * time.Second

// SourceConfig configures a Source. Zero values mean the defaults.
type SourceConfig struct {
	// JetStream reads the messages. Required. Create it on a connection
	// that reconnects for ever (nats.MaxReconnects(-1)).
	JetStream jetstream.JetStream
	// Stream is the stream to read. Required.
	Stream string
	// Consumer is the durable pull consumer's name. Required. When the
	// stream has no consumer of that name, the Source creates it: explicit
	// acks, no limit on deliveries, AckWait, FilterSubject, from the
	// stream's first message. An existing one must ack explicitly, deliver
	// without limit (MaxDeliver -1) and redeliver within AckWait, or
	// Fetch refuses it (mqlite.ErrInvalidArgument): a message dropped
	// after its last delivery would never reach the queue.
	Consumer string
	// FilterSubject narrows a consumer the Source creates to the subjects
	// it matches. Defaults to the whole stream.
	FilterSubject string
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a message again, and so the Source's Redelivery.
	// Defaults to 30s.
	AckWait time.Duration
}

// Source reads a JetStream durable pull consumer for a relay.Intake. Each
// message's id is its Nats-Msg-Id header, or "<stream>:<stream sequence>"
// without one; its subject is the NATS subject, its GroupID the
// Mqlite-Group-Id header, and its other headers (but the server's Nats-*)
// its properties. A Source is for one Intake: it is not safe for
// concurrent use.
type Source struct {
	cfg SourceConfig
	it  jetstream.MessagesContext // nil until the first Fetch, and after an error
}

var _ relay.Source = (*Source)(nil)

// NewSource returns a Source for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and reads nothing: the first Fetch binds the
// consumer.
func NewSource(cfg SourceConfig) (*Source, error) {
	switch {
	case cfg.JetStream == nil:
		return nil, invalid("nil JetStream")
	case cfg.Stream == "":
		return nil, invalid("no Stream")
	case cfg.Consumer == "":
		return nil, invalid("no Consumer")
	}
	var err error
	if cfg.AckWait, err = setting.Default("AckWait", cfg.AckWait, DefaultSourceAckWait); err != nil {
		return nil, invalid("%v", err)
	}
	return &Source{cfg: cfg}, nil
}

// Redelivery is Config.AckWait.
func (s *Source) Redelivery() time.Duration { return s.cfg.AckWait }

// Close stops reading; messages delivered and not acknowledged come again
// after AckWait.
func (s *Source) Close() {
	if s.it != nil {
		s.it.Stop()
		s.it = nil
	}
}

// gatherWait is how long Fetch waits for a further message of a batch once
// it has one.
const gatherWait = 5 * time.Millisecond

// Fetch waits for a message and returns it with those that follow at
// once, up to max. A missing stream is relay.Gone ("no_stream"); a
// consumer deleted under it is created again on the next Fetch.
func (s *Source) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	if s.it == nil {
		if err := s.open(ctx, max); err != nil {
			return nil, err
		}
	}
	var out []relay.Inbound
	for len(out) < max {
		opt := jetstream.NextContext(ctx)
		if len(out) > 0 {
			opt = jetstream.NextMaxWait(gatherWait)
		}
		m, err := s.it.Next(opt)
		switch {
		case err == nil:
			out = append(out, inbound(m))
			continue
		case len(out) > 0 && errors.Is(err, natsgo.ErrTimeout):
			return out, nil
		case ctx.Err() != nil:
			return nil, s.giveBackAll(out, ctx.Err())
		}
		s.Close()
		return nil, s.giveBackAll(out, fmt.Errorf("nats: next message: %w", err))
	}
	return out, nil
}

// giveBackAll naks msgs and returns err.
func (s *Source) giveBackAll(msgs []relay.Inbound, err error) error {
	for _, m := range msgs {
		_ = m.Ref.(jetstream.Msg).Nak()
	}
	return err
}

// open binds the consumer, creating it when missing, and starts reading.
func (s *Source) open(ctx context.Context, max int) error {
	st, err := s.cfg.JetStream.Stream(ctx, s.cfg.Stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return relay.Gone("no_stream", fmt.Errorf("nats: stream %s: %w", s.cfg.Stream, err))
		}
		return fmt.Errorf("nats: stream %s: %w", s.cfg.Stream, err)
	}
	c, err := st.Consumer(ctx, s.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c, err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: s.cfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: s.cfg.AckWait,
			MaxDeliver: -1, FilterSubject: s.cfg.FilterSubject, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
	}
	if err != nil {
		return fmt.Errorf("nats: consumer %s of stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	if err := s.check(c.CachedInfo().Config); err != nil {
		return err
	}
	it, err := c.Messages(jetstream.PullMaxMessages(2 * max))
	if err != nil {
		return fmt.Errorf("nats: consume %s: %w", s.cfg.Consumer, err)
	}
	s.it = it
	return nil
}

// check refuses a consumer that can drop a message or redeliver it later
// than AckWait.
func (s *Source) check(cc jetstream.ConsumerConfig) error {
	longest := cc.AckWait
	for _, d := range cc.BackOff {
		longest = max(longest, d)
	}
	switch {
	case cc.AckPolicy != jetstream.AckExplicitPolicy:
		return invalid("consumer %s does not ack explicitly (%v)", s.cfg.Consumer, cc.AckPolicy)
	case cc.MaxDeliver > 0:
		return invalid("consumer %s drops a message after %d deliveries: want MaxDeliver -1", s.cfg.Consumer, cc.MaxDeliver)
	case longest > s.cfg.AckWait:
		return invalid("consumer %s may redeliver %v after a delivery, over the AckWait of %v the queue's dedup window was checked against",
			s.cfg.Consumer, longest, s.cfg.AckWait)
	}
	return nil
}

// inbound is the relay.Inbound of m.
func inbound(m jetstream.Msg) relay.Inbound {
	in := relay.Inbound{Message: outbox.Message{Body: m.Data(), Subject: m.Subject()}, Ref: m}
	h := m.Headers()
	in.MessageID = h.Get(jetstream.MsgIDHeader)
	if md, err := m.Metadata(); err == nil {
		in.Time = md.Timestamp
		in.Origin = fmt.Sprintf("stream %s seq %d", md.Stream, md.Sequence.Stream)
		if in.MessageID == "" {
			in.MessageID = fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
		}
	}
	in.GroupID = h.Get(relay.HeaderGroupID)
	for k, v := range h {
		if len(v) == 0 || k == relay.HeaderGroupID || len(k) >= 5 && strings.EqualFold(k[:5], "nats-") {
			continue
		}
		if in.Properties == nil {
			in.Properties = map[string]string{}
		}
		in.Properties[k] = v[0]
	}
	return in
}

// Ack acknowledges msgs and waits until the server has them.
func (s *Source) Ack(ctx context.Context, msgs []relay.Inbound) error {
	var errs []error
	for _, m := range msgs {
		if err := m.Ref.(jetstream.Msg).Ack(); err != nil {
			errs = append(errs, err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, DefaultAckTimeout) // the flush wants a deadline
	defer cancel()
	if err := s.cfg.JetStream.Conn().FlushWithContext(fctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Nack asks the server to deliver msgs again at once.
func (s *Source) Nack(_ context.Context, msgs []relay.Inbound) error {
	var errs []error
	for _, m := range msgs {
		if err := m.Ref.(jetstream.Msg).Nak(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
