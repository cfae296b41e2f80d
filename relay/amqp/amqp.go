// Package amqp is a relay.Sink that publishes to RabbitMQ (AMQP 0-9-1),
// and a relay.Source (NewSource) that consumes a RabbitMQ queue into an
// mqlite queue through relay.Intake.
//
// Each message is published persistent, with the mandatory flag, its
// message-id set to relay.ID (the same on every retry) and its fields and
// properties as headers (a property whose name is over 255 bytes stays
// behind), on a channel in confirm mode. A message is
// reported delivered only once the broker confirmed it; a nack, a missing
// confirm (Config.ConfirmTimeout) and a dropped connection or channel are
// retried; a message returned as unroutable (no queue bound for it) is
// held (relay.Hold) until a binding exists, and so is a message sent to an
// exchange that does not exist (the broker closes the channel with 404
// NOT_FOUND; the sink opens a new one on the same connection). After a
// drop the sink reconnects on the next Send, with a backoff between
// attempts.
//
// RabbitMQ does not drop duplicates by itself: a message whose confirm was
// lost is published again with the same message-id, and consumers should
// drop the ids they have seen.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/tracing"
	"github.com/mqlite/mqlite/relay"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultRoutingKey     = "{{.Queue}}"
	DefaultConfirmTimeout = 10 * time.Second
	DefaultDialTimeout    = 10 * time.Second
)

// DefaultReconnect is the backoff between reconnection attempts when
// Config.Reconnect is zero: 100ms doubling up to 10s.
var DefaultReconnect = consumer.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second}

// ErrInvalidConfig is matched, together with mqlite.ErrInvalidArgument, by
// every error of New.
var ErrInvalidConfig = errors.New("amqp: invalid config")

// ErrReturned is the failure of a message the broker returned because no
// queue was bound to take it (the mandatory flag). The message is held
// (relay.Hold): the hold counts no delivery (the relay's run that claimed
// it counted one) and nothing is dead-lettered while the binding is
// missing, and it goes out once one exists.
var ErrReturned = errors.New("amqp: message returned unroutable")

// ErrNoExchange is the failure of a message published to an exchange the
// broker does not have (Config.Exchange not declared yet, or deleted). The
// message is held (relay.Hold), as an unroutable one is, until the
// exchange exists.
var ErrNoExchange = errors.New("amqp: no such exchange")

// ErrClosed is returned for the messages of a Send after Close.
var ErrClosed = errors.New("amqp: sink closed")

// Config configures a Sink. Zero values mean the defaults.
type Config struct {
	// URL is the broker's amqp:// or amqps:// URL. Required.
	URL string
	// Exchange is the exchange to publish to; "" is the default
	// exchange, which routes by queue name.
	Exchange string
	// RoutingKey is a relay.Template that names each message's routing
	// key. Defaults to "{{.Queue}}". A message it cannot render is held
	// (relay.Unrenderable), never dead-lettered.
	RoutingKey string
	// ConfirmTimeout is how long a publish may wait for the broker's
	// confirm before the message is retried. Defaults to 10s.
	ConfirmTimeout time.Duration
	// DialTimeout bounds each connection attempt. Defaults to 10s.
	DialTimeout time.Duration
	// Reconnect spaces the connection attempts after a drop or a failed
	// dial. Defaults to DefaultReconnect.
	Reconnect consumer.Backoff
}

// Sink publishes messages to RabbitMQ over one connection and one confirm
// channel. It is safe for concurrent use.
type Sink struct {
	cfg Config
	key *relay.Template

	dial     chan struct{} // held while a goroutine dials: a lock that honours ctx
	mu       sync.Mutex
	sess     *session            // nil until dialled, or after a drop
	conn     *amqp091.Connection // the live connection of a session whose channel closed, for the next one
	closed   bool
	failures int       // failed dials in a row
	retryAt  time.Time // no dial before then
}

var _ relay.Sink = (*Sink)(nil)

// New returns a Sink for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and connects on the first Send.
func New(cfg Config) (*Sink, error) {
	if cfg.URL == "" {
		return nil, invalid("no URL")
	}
	if _, err := amqp091.ParseURI(cfg.URL); err != nil {
		return nil, invalid("URL: %v", err)
	}
	if cfg.RoutingKey == "" {
		cfg.RoutingKey = DefaultRoutingKey
	}
	key, err := relay.ParseTemplate(cfg.RoutingKey)
	if err != nil {
		return nil, invalid("RoutingKey: %v", err)
	}
	if cfg.ConfirmTimeout, err = setting.Default("ConfirmTimeout", cfg.ConfirmTimeout, DefaultConfirmTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.DialTimeout, err = setting.Default("DialTimeout", cfg.DialTimeout, DefaultDialTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.Reconnect == (consumer.Backoff{}) {
		cfg.Reconnect = DefaultReconnect
	}
	return &Sink{cfg: cfg, key: key, dial: make(chan struct{}, 1)}, nil
}

// Close closes the connection. Sends after Close fail with ErrClosed.
func (s *Sink) Close() error {
	s.mu.Lock()
	sess, conn := s.sess, s.conn
	s.sess, s.conn, s.closed = nil, nil, true
	s.mu.Unlock()
	if sess != nil {
		return sess.close()
	}
	if conn != nil {
		if err := conn.Close(); err != nil && !errors.Is(err, amqp091.ErrClosed) {
			return fmt.Errorf("amqp: close: %w", err)
		}
	}
	return nil
}

// Send publishes msgs and waits for the broker's confirms. Cancelling ctx
// stops waiting: the messages not yet confirmed are retried.
func (s *Sink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	sess, err := s.session(ctx)
	if err != nil {
		for i := range out {
			out[i] = relay.RetryAfter(err, 0)
		}
		return out
	}
	confirms := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		key, err := s.key.Render(m)
		if err != nil {
			out[i] = relay.Unrenderable(fmt.Errorf("amqp: routing key: %w", err))
			continue
		}
		confirms[i], err = sess.ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.Exchange, key, true, false, publishing(m))
		if err != nil {
			out[i] = relay.RetryAfter(fmt.Errorf("amqp: publish: %w", err), 0)
			s.drop(sess)
		}
	}
	timer := time.NewTimer(s.cfg.ConfirmTimeout)
	defer timer.Stop()
	for i, c := range confirms {
		if c == nil {
			continue
		}
		select {
		case <-c.Done():
			if !c.Acked() {
				out[i] = relay.RetryAfter(errors.New("amqp: broker nacked the message or the channel closed"), 0)
			}
		case <-timer.C:
			out[i] = relay.RetryAfter(fmt.Errorf("amqp: no confirm within %v", s.cfg.ConfirmTimeout), 0)
			confirms[i] = nil
		case <-ctx.Done():
			out[i] = relay.RetryAfter(fmt.Errorf("amqp: %w", ctx.Err()), 0)
			confirms[i] = nil
		}
	}
	// A basic.return comes before the confirm of its message: once the
	// returns seen so far are recorded, every return of this batch is.
	sess.sync(ctx)
	for i, c := range confirms {
		if c != nil && c.Acked() {
			if reply, ok := sess.returned(relay.ID(msgs[i])); ok {
				out[i] = relay.Hold("unroutable", fmt.Errorf("%w: %s", ErrReturned, reply))
			}
		}
	}
	holdMissingExchange(ctx, sess, out)
	return out
}

// holdMissingExchange turns the failures of out into holds when the broker
// closed the channel because the exchange does not exist: no retry of the
// messages would cure that, and none should count a delivery.
func holdMissingExchange(ctx context.Context, sess *session, out []relay.Outcome) {
	e := sess.closedWith(ctx)
	if e == nil || e.Code != amqp091.NotFound {
		return
	}
	for i, o := range out {
		if o.Err != nil && !o.DeadLetter && !o.Hold {
			out[i] = relay.Hold("no_exchange", fmt.Errorf("%w: %s", ErrNoExchange, e.Reason))
		}
	}
}

// maxFieldName is the longest name of an AMQP header (a short string).
const maxFieldName = 255

// publishing builds the AMQP message of m.
func publishing(m mqlite.Message) amqp091.Publishing {
	h := amqp091.Table{
		relay.HeaderQueue:         m.Queue,
		relay.HeaderSeq:           strconv.FormatInt(m.Seq, 10),
		relay.HeaderDeliveryCount: int32(m.DeliveryCount),
	}
	for k, v := range m.Properties {
		if len(k) <= maxFieldName { // a longer name cannot be sent: the property stays behind
			h[k] = v
		}
	}
	delete(h, tracing.Traceparent) // passed on below, checked
	delete(h, tracing.Tracestate)
	relay.TraceContext(m, func(k, v string) { h[k] = v })
	if m.Subject != "" {
		h[relay.HeaderSubject] = m.Subject
	}
	if m.GroupID != "" {
		h[relay.HeaderGroupID] = m.GroupID
	}
	p := amqp091.Publishing{
		MessageId: relay.ID(m), Headers: h, Body: m.Body,
		DeliveryMode: amqp091.Persistent, Timestamp: m.EnqueuedAt,
		ContentType: m.Properties["content-type"],
	}
	return p
}

// session returns the live session, dialling one (after the reconnect
// backoff) when there is none.
func (s *Sink) session(ctx context.Context) (*session, error) {
	if sess, err := s.current(); sess != nil || err != nil {
		return sess, err
	}
	select {
	case s.dial <- struct{}{}:
		defer func() { <-s.dial }()
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp: %w", ctx.Err())
	}
	if sess, err := s.current(); sess != nil || err != nil {
		return sess, err // another Send dialled meanwhile
	}
	s.mu.Lock()
	wait := time.Until(s.retryAt)
	s.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("amqp: %w", ctx.Err())
		}
	}
	sess, err := s.open()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failures++
		s.retryAt = time.Now().Add(s.cfg.Reconnect.Delay(s.failures))
		return nil, err
	}
	if s.closed {
		_ = sess.close()
		return nil, ErrClosed
	}
	s.failures, s.sess = 0, sess
	return sess, nil
}

// open opens a session: a channel on the connection a closed channel left
// behind, or on a new connection when there is none (or it fails).
func (s *Sink) open() (*session, error) {
	s.mu.Lock()
	conn := s.conn
	s.conn = nil
	s.mu.Unlock()
	if conn != nil && !conn.IsClosed() {
		if sess, err := openSession(conn); err == nil {
			return sess, nil
		}
		_ = conn.Close()
	}
	conn, err := dial(s.cfg)
	if err != nil {
		return nil, err
	}
	sess, err := openSession(conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return sess, nil
}

// current returns the live session, nil when there is none, or ErrClosed.
// A session found dead is forgotten. When only its channel closed (the
// broker closes a channel over an error of one publish), its connection is
// kept for the next session, at once; when the connection dropped, it is
// closed and the next dial waits for the reconnect backoff.
func (s *Sink) current() (*session, error) {
	s.mu.Lock()
	sess := s.sess
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if sess == nil || !sess.dead() {
		s.mu.Unlock()
		return sess, nil
	}
	s.sess = nil
	if !sess.conn.IsClosed() {
		s.conn = sess.conn
		s.mu.Unlock()
		return nil, nil
	}
	s.failures = 1
	s.retryAt = time.Now().Add(s.cfg.Reconnect.Delay(1))
	s.mu.Unlock()
	_ = sess.close() // the connection is gone; this frees its goroutines
	return nil, nil
}

// drop forgets sess, if a publish failed because it died.
func (s *Sink) drop(sess *session) {
	if sess.dead() {
		_, _ = s.current()
	}
}

func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}
