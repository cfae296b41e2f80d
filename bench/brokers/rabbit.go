package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitURL is the local RabbitMQ.
const rabbitURL = "amqp://guest:guest@127.0.0.1:5672/"

// rabbit is the local RabbitMQ: a durable classic queue, persistent
// messages, publisher confirms.
type rabbit struct {
	conn *amqp.Connection
	pub  *amqp.Channel // in confirm mode
	pid  int
	sz   Sizes
}

func openRabbit(ctx context.Context, sz Sizes) ([]Side, error) {
	r := &rabbit{pid: pidOf("beam.smp"), sz: sz}
	if err := r.dial(); err != nil {
		return nil, err
	}
	return []Side{r}, nil
}

// dial opens the connection and its confirm-mode publishing channel.
func (r *rabbit) dial() error {
	conn, err := amqp.DialConfig(rabbitURL, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	pub, err := conn.Channel()
	if err == nil {
		err = pub.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	r.conn, r.pub = conn, pub
	return nil
}

func (r *rabbit) Name() string { return "RabbitMQ" }

func (r *rabbit) Settings() string {
	v, _ := r.conn.Properties["version"].(string)
	return fmt.Sprintf("the local RabbitMQ %s on 127.0.0.1:5672, a durable classic queue, persistent messages (delivery mode 2), publisher confirms awaited per message (or per batch); github.com/rabbitmq/amqp091-go; consume one at a time: basic.consume with QoS %d and one basic.ack per message; in batches: QoS 100 and one multiple ack per 100; consume → produce: the same consumer, each body published to the second queue with its confirm awaited, then acked (not atomic); CPU of its beam.smp", v, r.sz.Window)
}

func (r *rabbit) Produces() bool { return true }

func (r *rabbit) CPU() time.Duration { return procCPU(r.pid) }

func (r *rabbit) Prepare(ctx context.Context, queue string) error {
	if r.conn.IsClosed() || r.pub.IsClosed() {
		// The server closes a channel or a connection on an error of an
		// earlier scenario; every scenario starts on a fresh one.
		_ = r.conn.Close()
		if err := r.dial(); err != nil {
			return err
		}
	}
	if _, err := r.pub.QueueDelete(queue, false, false, false); err != nil {
		return err
	}
	_, err := r.pub.QueueDeclare(queue, true, false, false, false, nil)
	return err
}

func (r *rabbit) publish(ctx context.Context, queue string, body []byte) (*amqp.DeferredConfirmation, error) {
	return r.pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: body})
}

func wait(ctx context.Context, dc *amqp.DeferredConfirmation) error {
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("rabbitmq: publish nacked")
	}
	return nil
}

func (r *rabbit) ProduceOne(ctx context.Context, queue string, bodies [][]byte) error {
	for _, b := range bodies {
		dc, err := r.publish(ctx, queue, b)
		if err != nil {
			return err
		}
		if err := wait(ctx, dc); err != nil {
			return err
		}
	}
	return nil
}

func (r *rabbit) ProduceBatch(ctx context.Context, queue string, bodies [][]byte, batch int) error {
	dcs := make([]*amqp.DeferredConfirmation, 0, batch)
	for i := 0; i < len(bodies); i += batch {
		dcs = dcs[:0]
		for _, b := range bodies[i:min(i+batch, len(bodies))] {
			dc, err := r.publish(ctx, queue, b)
			if err != nil {
				return err
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if err := wait(ctx, dc); err != nil {
				return err
			}
		}
	}
	return nil
}

// consume runs each on n deliveries of queue, on a channel of its own with
// QoS prefetch.
func (r *rabbit) consume(ctx context.Context, queue string, prefetch, n int, each func(i int, d amqp.Delivery) error) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return err
	}
	ds, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for i := range n {
		select {
		case d, ok := <-ds:
			if !ok {
				return errors.New("rabbitmq: the consumer was cancelled")
			}
			if err := each(i, d); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (r *rabbit) ConsumeOne(ctx context.Context, queue string, n int) error {
	return r.consume(ctx, queue, r.sz.Window, n, func(_ int, d amqp.Delivery) error { return d.Ack(false) })
}

func (r *rabbit) ConsumeBatch(ctx context.Context, queue string, n, batch int) error {
	return r.consume(ctx, queue, batch, n, func(i int, d amqp.Delivery) error {
		if (i+1)%batch == 0 || i == n-1 {
			return d.Ack(true)
		}
		return nil
	})
}

// Move takes each message of from (QoS of the window), publishes its body
// to to and waits for the confirm, then acks it: the usual stage, which is
// not atomic (a crash between the confirm and the ack sends it twice).
func (r *rabbit) Move(ctx context.Context, from, to string, n int) error {
	if n == 0 {
		return nil
	}
	return r.consume(ctx, from, r.sz.Window, n, func(_ int, d amqp.Delivery) error {
		dc, err := r.publish(ctx, to, d.Body)
		if err != nil {
			return err
		}
		if err := wait(ctx, dc); err != nil {
			return err
		}
		return d.Ack(false)
	})
}

func (r *rabbit) Latency(ctx context.Context, queue string, bodies [][]byte) ([]time.Duration, error) {
	arrived := make(chan time.Time, 1)
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		done <- r.consume(cctx, queue, r.sz.Window, len(bodies), func(_ int, d amqp.Delivery) error {
			arrived <- time.Now()
			return d.Ack(false)
		})
	}()
	return sendAndWait(ctx, bodies, arrived, done, func(b []byte) error {
		dc, err := r.publish(ctx, queue, b)
		if err != nil {
			return err
		}
		return wait(ctx, dc)
	})
}

func (r *rabbit) Close() error { return r.conn.Close() }
