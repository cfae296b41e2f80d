package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsURL is the local NATS server, with JetStream on.
const natsURL = "nats://127.0.0.1:4222"

// jet is the local JetStream: a stream per queue with file storage, one
// replica, a durable pull consumer with explicit acks.
type jet struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pid int
	sz  Sizes
}

func openJetStream(ctx context.Context, sz Sizes) ([]Side, error) {
	nc, err := nats.Connect(natsURL, nats.Timeout(3*time.Second))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	return []Side{&jet{nc: nc, js: js, pid: pidOf("nats-server"), sz: sz}}, nil
}

func (j *jet) Name() string { return "JetStream" }

func (j *jet) Settings() string {
	return fmt.Sprintf("the local nats-server %s on 127.0.0.1:4222, one stream per queue with file storage, 1 replica (its default fsync policy); github.com/nats-io/nats.go/jetstream; produce one at a time: Publish awaiting its PubAck; in batches: 100 PublishAsync, then their acks; consume one at a time: a durable pull consumer with explicit acks, Messages with PullMaxMessages(%d), one Ack per message; in batches: Fetch(100) on an ack-all consumer, one Ack per batch; CPU of its nats-server process", j.nc.ConnectedServerVersion(), j.sz.Window)
}

func (j *jet) Produces() bool { return true }

func (j *jet) CPU() time.Duration { return procCPU(j.pid) }

func (j *jet) Prepare(ctx context.Context, queue string) error {
	if err := j.js.DeleteStream(ctx, queue); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: queue, Subjects: []string{queue},
		Storage: jetstream.FileStorage, Replicas: 1})
	return err
}

func (j *jet) ProduceOne(ctx context.Context, queue string, bodies [][]byte) error {
	for _, b := range bodies {
		if _, err := j.js.Publish(ctx, queue, b); err != nil {
			return err
		}
	}
	return nil
}

func (j *jet) ProduceBatch(ctx context.Context, queue string, bodies [][]byte, batch int) error {
	for i := 0; i < len(bodies); i += batch {
		futs := make([]jetstream.PubAckFuture, 0, batch)
		for _, b := range bodies[i:min(i+batch, len(bodies))] {
			f, err := j.js.PublishAsync(queue, b)
			if err != nil {
				return err
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (j *jet) consumer(ctx context.Context, queue string, policy jetstream.AckPolicy) (jetstream.Consumer, error) {
	return j.js.CreateOrUpdateConsumer(ctx, queue, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: policy,
		MaxAckPending: 10000})
}

// consume runs each on n messages of queue, from a streaming pull.
func (j *jet) consume(ctx context.Context, queue string, n int, each func(m jetstream.Msg) error) error {
	c, err := j.consumer(ctx, queue, jetstream.AckExplicitPolicy)
	if err != nil {
		return err
	}
	it, err := c.Messages(jetstream.PullMaxMessages(j.sz.Window))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for got := 0; got < n; {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			continue // a heartbeat late on a busy machine: the pull goes on
		}
		if err != nil {
			return err
		}
		got++
		if err := each(m); err != nil {
			return err
		}
	}
	return nil
}

func (j *jet) ConsumeOne(ctx context.Context, queue string, n int) error {
	return j.consume(ctx, queue, n, func(m jetstream.Msg) error { return m.Ack() })
}

func (j *jet) ConsumeBatch(ctx context.Context, queue string, n, batch int) error {
	c, err := j.consumer(ctx, queue, jetstream.AckAllPolicy)
	if err != nil {
		return err
	}
	for got := 0; got < n; {
		b, err := c.Fetch(batch, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		var last jetstream.Msg
		for m := range b.Messages() {
			last = m
			got++
		}
		if err := b.Error(); err != nil {
			return err
		}
		if last != nil {
			if err := last.Ack(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Move is not measured on JetStream: the stage compares with RabbitMQ.
func (j *jet) Move(context.Context, string, string, int) error { return errNotApplicable }

func (j *jet) Latency(ctx context.Context, queue string, bodies [][]byte) ([]time.Duration, error) {
	arrived := make(chan time.Time, 1)
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		done <- j.consume(cctx, queue, len(bodies), func(m jetstream.Msg) error {
			arrived <- time.Now()
			return m.Ack()
		})
	}()
	return sendAndWait(ctx, bodies, arrived, done, func(b []byte) error {
		_, err := j.js.Publish(ctx, queue, b)
		return err
	})
}

func (j *jet) Close() error {
	j.nc.Close()
	return nil
}
