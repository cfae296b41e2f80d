package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	relaynats "github.com/mqlite/mqlite/relay/nats"
	"github.com/mqlite/mqlite/relay/webhook"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// relayFlags are the flags of "mqlite relay".
type relayFlags struct {
	db, queue, sink   string
	concurrency, max  int
	drain             time.Duration
	url               string
	secrets           stringList
	envelope          bool
	timeout           time.Duration
	natsURL, subject  string
	amqpURL, exchange string
	routingKey        string
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f relayFlags
	fs.StringVar(&f.db, "db", "", "the mqlite `file` to relay from (required)")
	fs.StringVar(&f.queue, "queue", "", "the `queue` to relay (required)")
	fs.StringVar(&f.sink, "sink", "", "where to: webhook, nats or amqp (required)")
	fs.IntVar(&f.concurrency, "concurrency", relay.DefaultConcurrency, "sends at once")
	fs.IntVar(&f.max, "batch", relay.DefaultMaxBatch, "messages per send at most")
	fs.DurationVar(&f.drain, "drain", consumer.DefaultDrainTimeout, "how long sends in flight may finish on SIGINT/SIGTERM")
	fs.StringVar(&f.url, "url", "", "webhook: the endpoint `URL`")
	fs.Var(&f.secrets, "secret", "webhook: a whsec_ signing `secret`; repeat it to sign with several (rotation)")
	fs.BoolVar(&f.envelope, "envelope", false, "webhook: POST a JSON envelope of the message instead of its body")
	fs.DurationVar(&f.timeout, "timeout", webhook.DefaultTimeout, "webhook: per-request timeout")
	fs.StringVar(&f.natsURL, "nats-url", natsgo.DefaultURL, "nats: the server `URL`s, comma-separated")
	fs.StringVar(&f.subject, "subject", relaynats.DefaultSubject, "nats: the subject `template`")
	fs.StringVar(&f.amqpURL, "amqp-url", "", "amqp: the broker `URL` (amqp://user:pass@host:5672/)")
	fs.StringVar(&f.exchange, "exchange", "", "amqp: the `exchange` (empty: the default exchange)")
	fs.StringVar(&f.routingKey, "routing-key", relayamqp.DefaultRoutingKey, "amqp: the routing key `template`")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "Usage: mqlite relay -db file -queue name -sink webhook|nats|amqp [sink flags]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Forwards the queue's messages to a webhook, NATS JetStream or RabbitMQ, at least")
		fmt.Fprintln(w, "once, each with its stable id, until SIGINT or SIGTERM. Logs each dead letter.")
		fmt.Fprintln(w, "Templates are Go text/templates over .Queue .Subject .GroupID .ID .Properties.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := f.check(fs); err != nil {
		fmt.Fprintf(stderr, "mqlite relay: %v\n", err)
		fs.Usage()
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := relayRun(ctx, f, log); err != nil {
		fmt.Fprintf(stderr, "mqlite relay: %v\n", err)
		return 1
	}
	return 0
}

// check reports a usage error.
func (f *relayFlags) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case f.db == "":
		return errors.New("-db is required")
	case f.queue == "":
		return errors.New("-queue is required")
	}
	switch f.sink {
	case "webhook":
		if f.url == "" || len(f.secrets) == 0 {
			return errors.New("-sink webhook needs -url and at least one -secret")
		}
	case "nats":
	case "amqp":
		if f.amqpURL == "" {
			return errors.New("-sink amqp needs -amqp-url")
		}
	default:
		return fmt.Errorf("-sink %q, want webhook, nats or amqp", f.sink)
	}
	return nil
}

// relayRun opens the store and the sink and relays until ctx is done.
func relayRun(ctx context.Context, f relayFlags, log *slog.Logger) error {
	st, err := mqlite.Open(ctx, f.db, mqlite.Options{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	sink, closeSink, err := openSink(f)
	if err != nil {
		return err
	}
	defer closeSink()
	q, err := st.GetQueue(ctx, f.queue)
	if err != nil {
		return err
	}
	r, err := relay.New(st, f.queue, sink, relay.Options{
		Concurrency: f.concurrency, MaxBatch: f.max, DrainTimeout: f.drain,
		Logger: log, Observer: deadLetterLog{log: log, maxDelivery: q.Options.MaxDeliveryCount},
	})
	if err != nil {
		return err
	}
	log.Info("relay: running", "db", f.db, "queue", f.queue, "sink", f.sink)
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
