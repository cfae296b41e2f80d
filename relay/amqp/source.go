package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// Defaults of SourceConfig's zero-valued fields.
const (
	DefaultPrefetch = 256
	// SourceRedelivery is a Source's Redelivery: RabbitMQ delivers an
	// unacknowledged message again as soon as its channel closes, and it
	// notices a connection that died without a word within two heartbeats
	// (amqp091's default heartbeat is 10s).
	SourceRedelivery = 30 * time.Second
)

// SourceConfig configures a Source. Zero values mean the defaults.
type SourceConfig struct {
	// URL is the broker's amqp:// or amqps:// URL. Required.
	URL string
	// Queue is the queue to consume, with manual acks. Required.
	Queue string
	// IDHeader names a header that carries a message's id when it has no
	// message-id property. A message with neither cannot be taken exactly
	// once (relay.ErrNoMessageID): the intake holds it aside in its hold
	// queue, and its log line names the queue and the delivery tag.
	IDHeader string
	// Prefetch is how many messages the broker sends ahead of the
	// acknowledgements (basic.qos). Defaults to 256.
	Prefetch int
	// DialTimeout bounds each connection attempt. Defaults to 10s.
	DialTimeout time.Duration
}

// Source consumes a RabbitMQ queue for a relay.Intake, with manual acks:
// a message is acknowledged only after the intake's commit, and given back
// (basic.nack with requeue) when the commit failed. A message's id is its
// message-id property (or the IDHeader header); its subject is its routing
// key, its GroupID its Mqlite-Group-Id header, its other headers its
// properties. A queue that does not exist holds the intake (relay.Gone,
// "no_queue"). A Source is for one Intake: it is not safe for concurrent
// use.
type Source struct {
	cfg        SourceConfig
	conn       *amqp091.Connection // nil until the first Fetch, and after an error
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
}

var _ relay.Source = (*Source)(nil)

// NewSource returns a Source for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and connects on the first Fetch.
func NewSource(cfg SourceConfig) (*Source, error) {
	switch {
	case cfg.URL == "":
		return nil, invalid("no URL")
	case cfg.Queue == "":
		return nil, invalid("no Queue")
	}
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return nil, invalid("URL: %v", err)
	}
	var err error
	if cfg.Prefetch, err = setting.Default("Prefetch", cfg.Prefetch, DefaultPrefetch); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.DialTimeout, err = setting.Default("DialTimeout", cfg.DialTimeout, DefaultDialTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	return &Source{cfg: cfg}, nil
}

// Redelivery is SourceRedelivery.
func (s *Source) Redelivery() time.Duration { return SourceRedelivery }

// Close closes the connection; the broker delivers again what was not
// acknowledged.
func (s *Source) Close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn, s.ch, s.deliveries = nil, nil, nil
	if errors.Is(err, amqp091.ErrClosed) {
		return nil
	}
	return err
}

// open connects and starts consuming.
func (s *Source) open() error {
	conn, err := dial(Config{URL: s.cfg.URL, DialTimeout: s.cfg.DialTimeout})
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(s.cfg.Prefetch, 0, false)
	}
	var d <-chan amqp091.Delivery
	if err == nil {
		d, err = ch.Consume(s.cfg.Queue, "", false, false, false, false, nil)
	}
	if err != nil {
		_ = conn.Close()
		var ae *amqp091.Error
		if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
			return relay.Gone("no_queue", fmt.Errorf("amqp: queue %s: %w", s.cfg.Queue, err))
		}
		return fmt.Errorf("amqp: consume %s: %w", s.cfg.Queue, err)
	}
	s.conn, s.ch, s.deliveries = conn, ch, d
	return nil
}

// Fetch waits for a message and returns it with those already delivered
// behind it, up to max.
func (s *Source) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	if s.conn == nil {
		if err := s.open(); err != nil {
			return nil, err
		}
	}
	var out []relay.Inbound
	for len(out) < max {
		var (
			d  amqp091.Delivery
			ok bool
		)
		if len(out) == 0 {
			select {
			case d, ok = <-s.deliveries:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		} else {
			select {
			case d, ok = <-s.deliveries:
			default:
				return out, nil
			}
		}
		if !ok { // the channel closed: the queue deleted, the connection lost
			_ = s.Close()
			if len(out) > 0 {
				return out, nil // acked on a closed channel they fail, and come again
			}
			return nil, fmt.Errorf("amqp: consumer of %s closed", s.cfg.Queue)
		}
		out = append(out, s.inbound(d))
	}
	return out, nil
}

// inbound is the relay.Inbound of d.
func (s *Source) inbound(d amqp091.Delivery) relay.Inbound {
	in := relay.Inbound{Message: outbox.Message{Body: d.Body, Subject: d.RoutingKey, MessageID: d.MessageId}, Time: d.Timestamp, Ref: d,
		Origin: fmt.Sprintf("queue %s delivery tag %d", s.cfg.Queue, d.DeliveryTag)}
	for k, v := range d.Headers {
		text, isText := v.(string)
		switch {
		case k == s.cfg.IDHeader && in.MessageID == "" && isText:
			in.MessageID = text
		case k == relay.HeaderGroupID && isText:
			in.GroupID = text
		default:
			if in.Properties == nil {
				in.Properties = map[string]string{}
			}
			if !isText {
				text = fmt.Sprint(v)
			}
			in.Properties[k] = text
		}
	}
	return in
}

// Ack acknowledges msgs.
func (s *Source) Ack(_ context.Context, msgs []relay.Inbound) error {
	var errs []error
	for _, m := range msgs {
		if err := m.Ref.(amqp091.Delivery).Ack(false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetAside rejects msgs without requeue (basic.nack): the intake held them
// aside without their bodies (over the store's MaxMessageBytes), and the
// queue's dead-letter exchange, when it has one, keeps them whole.
func (s *Source) SetAside(_ context.Context, msgs []relay.Inbound) error {
	var errs []error
	for _, m := range msgs {
		if err := m.Ref.(amqp091.Delivery).Nack(false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var _ relay.AsideSource = (*Source)(nil)

// Nack gives msgs back to the queue (basic.nack with requeue).
func (s *Source) Nack(_ context.Context, msgs []relay.Inbound) error {
	var errs []error
	for _, m := range msgs {
		if err := m.Ref.(amqp091.Delivery).Nack(false, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
