package amqp

import (
	"context"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// session is one confirm channel on the sink's connection, with the
// goroutine that records the messages the broker returns and why the
// broker closed the channel.
type session struct {
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	barrier chan chan struct{} // sync's requests to the returns goroutine
	closes  chan *amqp091.Error
	gone    chan struct{} // closed when the returns goroutine ends (the channel closed)

	mu       sync.Mutex
	back     map[string]string // message-id → the broker's reply text, for returned messages
	closeErr *amqp091.Error    // why the broker closed the channel; set before gone closes
}

// dial connects to cfg.URL.
func dial(cfg Config) (*amqp091.Connection, error) {
	conn, err := amqp091.DialConfig(cfg.URL, amqp091.Config{Dial: amqp091.DefaultDial(cfg.DialTimeout)})
	if err != nil {
		return nil, fmt.Errorf("amqp: dial: %w", err)
	}
	return conn, nil
}

// openSession opens a confirm channel on conn. It leaves conn open when it
// fails.
func openSession(conn *amqp091.Connection) (*session, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	s := &session{
		conn: conn, ch: ch, barrier: make(chan chan struct{}), gone: make(chan struct{}),
		closes: ch.NotifyClose(make(chan *amqp091.Error, 1)), back: map[string]string{},
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 64))
	go s.watch(returns)
	return s, nil
}

// watch records returned messages until the channel closes (amqp091 then
// closes returns, after it handed the close's cause to closes), and
// answers sync's barriers between them.
func (s *session) watch(returns <-chan amqp091.Return) {
	defer close(s.gone)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				s.mu.Lock()
				select {
				case s.closeErr = <-s.closes:
				default:
				}
				s.mu.Unlock()
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

// closedWith returns the error the broker closed the channel with, nil
// while the channel is open or when it closed for another reason (the
// connection dropped, Close). It waits for the returns goroutine to record
// the cause, or for ctx.
func (s *session) closedWith(ctx context.Context) *amqp091.Error {
	if !s.ch.IsClosed() {
		return nil
	}
	select {
	case <-s.gone:
	case <-ctx.Done():
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeErr
}

// dead reports whether the connection or the channel has closed.
func (s *session) dead() bool {
	return s.conn.IsClosed() || s.ch.IsClosed()
}

// close closes the connection and waits for the returns goroutine.
func (s *session) close() error {
	err := s.conn.Close()
	<-s.gone
	if err != nil && err != amqp091.ErrClosed {
		return fmt.Errorf("amqp: close: %w", err)
	}
	return nil
}
