package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	relaynats "github.com/mqlite/mqlite/relay/nats"
	"github.com/mqlite/mqlite/relay/webhook"
)

// relayFlags are the flags of "mqlite relay".
type relayFlags struct {
	queue, sink       string
	concurrency, max  int
	drain             time.Duration
	url               string
	secrets           []string
	envelope          bool
	timeout           time.Duration
	natsURL, subject  string
	amqpURL, exchange string
	routingKey        string
}

func relayCmd(g *globals) *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "forward a queue to a webhook, NATS JetStream or RabbitMQ",
		Long: `relay forwards the queue's messages to a webhook, NATS JetStream or RabbitMQ, at
least once, each with its stable id, until SIGINT or SIGTERM, and logs each
dead letter. It reads a local file (--db) or a broker (--url, --key: a consumer
key on the queue is enough). Templates are Go text/templates over .Queue
.Subject .GroupID .ID .Properties.`,
		Example: `  mqlite relay --db app.db --queue events --sink webhook --webhook-url https://hooks.internal/in --secret whsec_...
  mqlite relay --url http://127.0.0.1:7420 --key $KEY --queue events --sink nats --nats-url nats://127.0.0.1:4222`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(g.stderr, nil))
			b, err := g.open(cmd.Context(), existingStore)
			if err != nil {
				return err
			}
			return errors.Join(relayRun(cmd.Context(), b, f, log), b.Close())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.queue, "queue", "", "the `queue` to relay (required)")
	fs.StringVar(&f.sink, "sink", "", "where to: webhook, nats or amqp (required)")
	fs.IntVar(&f.concurrency, "concurrency", relay.DefaultConcurrency, "sends at once")
	fs.IntVar(&f.max, "batch", relay.DefaultMaxBatch, "messages per send at most")
	fs.DurationVar(&f.drain, "drain", consumer.DefaultDrainTimeout, "how long sends in flight may finish on SIGINT/SIGTERM")
	fs.StringVar(&f.url, "webhook-url", "", "webhook: the endpoint `URL`")
	fs.StringArrayVar(&f.secrets, "secret", nil, "webhook: a whsec_ signing `secret`; repeat it to sign with several (rotation)")
	fs.BoolVar(&f.envelope, "envelope", false, "webhook: POST a JSON envelope of the message instead of its body")
	fs.DurationVar(&f.timeout, "timeout", webhook.DefaultTimeout, "webhook: per-request timeout")
	fs.StringVar(&f.natsURL, "nats-url", natsgo.DefaultURL, "nats: the server `URL`s, comma-separated")
	fs.StringVar(&f.subject, "subject", relaynats.DefaultSubject, "nats: the subject `template`")
	fs.StringVar(&f.amqpURL, "amqp-url", "", "amqp: the broker `URL` (amqp://user:pass@host:5672/)")
	fs.StringVar(&f.exchange, "exchange", "", "amqp: the `exchange` (empty: the default exchange)")
	fs.StringVar(&f.routingKey, "routing-key", relayamqp.DefaultRoutingKey, "amqp: the routing key `template`")
	return cmd
}

// check reports a usage error.
func (f *relayFlags) check() error {
	if f.queue == "" {
		return usagef("relay needs --queue")
	}
	switch f.sink {
	case "webhook":
		if f.url == "" || len(f.secrets) == 0 {
			return usagef("--sink webhook needs --webhook-url and at least one --secret")
		}
	case "nats":
	case "amqp":
		if f.amqpURL == "" {
			return usagef("--sink amqp needs --amqp-url")
		}
	default:
		return usagef("--sink must be webhook, nats or amqp, not %q", f.sink)
	}
	return nil
}

// relayRun opens the sink and relays src's queue until ctx is done.
func relayRun(ctx context.Context, src backend, f relayFlags, log *slog.Logger) error {
	sink, closeSink, err := openSink(f)
	if err != nil {
		return err
	}
	defer closeSink()
	maxDelivery := mqlite.DefaultMaxDeliveryCount
	q, err := src.GetQueue(ctx, f.queue)
	switch {
	case err == nil:
		maxDelivery = q.Options.MaxDeliveryCount
	case errors.Is(err, client.ErrForbidden):
		// A consumer key cannot read the queue's options: assume the default.
	default:
		return err
	}
	r, err := relay.New(src, f.queue, sink, relay.Options{
		Concurrency: f.concurrency, MaxBatch: f.max, DrainTimeout: f.drain,
		Logger: log, Observer: deadLetterLog{log: log, maxDelivery: maxDelivery},
	})
	if err != nil {
		return err
	}
	log.Info("relay: running", "queue", f.queue, "sink", f.sink)
	if err := r.Run(ctx); err != nil {
		return err
	}
	log.Info("relay: stopped")
	return nil
}

// openSink builds the sink the flags name, and its closer.
func openSink(f relayFlags) (relay.Sink, func(), error) {
	switch f.sink {
	case "webhook":
		s, err := webhook.New(webhook.Config{URL: f.url, Secrets: f.secrets, Envelope: f.envelope, Timeout: f.timeout})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case "nats":
		nc, err := natsgo.Connect(f.natsURL, natsgo.MaxReconnects(-1), natsgo.Name("mqlite relay"))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to nats: %w", err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(relaynats.DefaultAckTimeout))
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		s, err := relaynats.New(relaynats.Config{JetStream: js, Subject: f.subject})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return s, func() { _ = nc.Drain() }, nil
	default: // amqp, as check made sure
		s, err := relayamqp.New(relayamqp.Config{URL: f.amqpURL, Exchange: f.exchange, RoutingKey: f.routingKey})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
}

// deadLetterLog logs each message the relay dead-letters: refused for good
// by the far side, or abandoned on its last allowed delivery (the store
// then dead-letters it).
type deadLetterLog struct {
	consumer.NopObserver
	log         *slog.Logger
	maxDelivery int
}

// Rejected logs a message the far side refused.
func (d deadLetterLog) Rejected(m mqlite.Message, _ time.Duration, cause error) {
	d.logDead(m, cause)
}

// Abandoned logs a message given back on its last allowed delivery.
func (d deadLetterLog) Abandoned(m mqlite.Message, _, _ time.Duration, cause error) {
	if m.DeliveryCount >= d.maxDelivery && cause != nil {
		d.logDead(m, fmt.Errorf("%s: %w", mqlite.ReasonMaxDelivery, cause))
	}
}

func (d deadLetterLog) logDead(m mqlite.Message, cause error) {
	d.log.Warn("relay: dead-lettered", "queue", m.Queue, "seq", m.Seq, "id", relay.ID(m),
		"delivery_count", m.DeliveryCount, "cause", cause)
}
