package main

import (
	"context"
	"fmt"
	"log/slog"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
	relaynats "github.com/mqlite/mqlite/relay/nats"
)

// checkFrom reports a usage error of "mqlite relay --from".
func (f *relayFlags) checkFrom() error {
	if f.sink != "" {
		return usagef("give --sink (out of the file) or --from (into it), not both")
	}
	switch f.from {
	case "nats":
		if f.stream == "" {
			return usagef("--from nats needs --stream")
		}
	case "amqp":
		if f.amqpURL == "" || f.amqpQueue == "" {
			return usagef("--from amqp needs the broker's URL (--amqp-url-file, %s or --amqp-url) and --amqp-queue", envAMQPURL)
		}
	case "kafka":
		if len(f.kafkaBrokers) == 0 || len(f.kafkaTopics) == 0 {
			return usagef("--from kafka needs --kafka-brokers and --kafka-topic")
		}
	default:
		return usagef("--from must be nats, amqp or kafka, not %q", f.from)
	}
	return nil
}

// intakeRun takes the source the flags name into the queue of st until
// ctx is done.
func intakeRun(ctx context.Context, st local, f relayFlags, log *slog.Logger) error {
	src, closeSrc, err := openSource(f)
	if err != nil {
		return err
	}
	defer closeSrc()
	cfg := relay.IntakeConfig{MaxBatch: f.max, Outage: f.outage, Logger: log, HoldQueue: f.holdQueue}
	if f.outage == 0 {
		cfg.Outage = -1 // --outage 0: no outage to outlast
	}
	if f.metricsAddr != "" {
		ro := metrics.NewRelayObserver(nil)
		stop, err := serveMetrics(f.metricsAddr, ro, log)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Observer = ro.Source(f.from)
	}
	in, err := relay.NewIntake(st.Store, f.queue, src, cfg)
	if err != nil {
		return err
	}
	log.Info("relay: taking", "queue", f.queue, "from", f.from)
	return runUntilStopped(ctx, log, f.drain, in.Run)
}

// openSource builds the source the flags name, and its closer.
func openSource(f relayFlags) (relay.Source, func(), error) {
	name := "mqlite-" + f.queue // the consumer's or group's name unless given
	switch f.from {
	case "nats":
		nc, err := natsgo.Connect(f.natsURL, natsgo.MaxReconnects(-1), natsgo.Name("mqlite relay --from"))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to nats: %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		src, err := relaynats.NewSource(relaynats.SourceConfig{JetStream: js, Stream: f.stream, Consumer: or(f.consumer, name), AckWait: f.ackWait})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return src, func() { src.Close(); _ = nc.Drain() }, nil
	case "kafka":
		src, err := relaykafka.NewSource(relaykafka.SourceConfig{Brokers: f.kafkaBrokers, Topics: f.kafkaTopics, Group: or(f.group, name), IDHeader: f.idHeader})
		if err != nil {
			return nil, nil, err
		}
		return src, src.Close, nil
	default: // amqp, as checkFrom made sure
		src, err := relayamqp.NewSource(relayamqp.SourceConfig{URL: f.amqpURL, Queue: f.amqpQueue, IDHeader: f.idHeader})
		if err != nil {
			return nil, nil, err
		}
		return src, func() { _ = src.Close() }, nil
	}
}

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
