package amqp

import (
	"context"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// session is one connection and its confirm channel, with the goroutine
// that records the messages the broker returns.
type session struct {
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	barrier chan chan struct{} // sync's requests to the returns goroutine
	gone    chan struct{}      // closed when the returns goroutine ends (the channel closed)

	mu   sync.Mutex
	back map[string]string // message-id → the broker's reply text, for returned messages
}

func dialSession(cfg Config) (*session, error) {
	conn, err := amqp091.DialConfig(cfg.URL, amqp091.Config{Dial: amqp091.DefaultDial(cfg.DialTimeout)})
	if err != nil {
		return nil, fmt.Errorf("amqp: dial: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	s := &session{
		conn: conn, ch: ch, barrier: make(chan chan struct{}), gone: make(chan struct{}),
		back: map[string]string{},
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 64))
	go s.watch(returns)
	return s, nil
}

// watch records returned messages until the channel closes (amqp091 then
// closes returns), and answers sync's barriers between them.
func (s *session) watch(returns <-chan amqp091.Return) {
	defer close(s.gone)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return
			}
			s.mu.Lock()
			s.back[r.MessageId] = fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText)
			s.mu.Unlock()
		case b := <-s.barrier:
			close(b)
		}
	}
}

// sync returns once every return the connection has read so far is
// recorded: the returns goroutine handles them in order, before the
// barrier.
func (s *session) sync(ctx context.Context) {
	b := make(chan struct{})
	select {
	case s.barrier <- b:
		<-b
	case <-s.gone:
	case <-ctx.Done():
	}
}

// returned reports, and forgets, whether the message id was returned.
func (s *session) returned(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply, ok := s.back[id]
	delete(s.back, id)
	return reply, ok
}

// dead reports whether the connection or the channel has closed.
func (s *session) dead() bool {
	return s.conn.IsClosed() || s.ch.IsClosed()
}

func (s *session) close() error {
	err := s.conn.Close()
	<-s.gone
	if err != nil && err != amqp091.ErrClosed {
		return fmt.Errorf("amqp: close: %w", err)
	}
	return nil
}
