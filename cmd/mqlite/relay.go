package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/relay"
	relayamqp "github.com/mqlite/mqlite/relay/amqp"
	relaykafka "github.com/mqlite/mqlite/relay/kafka"
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
	secretFiles       []string
	amqpURLFile       string
	webhookURLFile    string
	envelope          bool
	timeout           time.Duration
	natsURL, subject  string
	amqpURL, exchange string
	routingKey        string
	kafkaBrokers      []string
	topic             string
	outage            time.Duration
	metricsAddr       string

	// --from: the intake's source
	from             string
	stream, consumer string
	ackWait          time.Duration
	amqpQueue        string
	kafkaTopics      []string
	group, idHeader  string
	holdQueue        string
}

func relayCmd(g *globals) *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "forward a queue to a webhook, NATS JetStream, RabbitMQ or Kafka, or take one of those into a queue",
		Long: `relay forwards the queue's messages to a webhook, NATS JetStream, RabbitMQ or Kafka, at
least once, each with its stable id, until SIGINT or SIGTERM, and logs each
dead letter. It reads a local file (--db) or a broker (--url, --key: a consumer
key on the queue is enough). Templates are Go text/templates over .Queue
.Subject .GroupID .ID .Properties; a message a template renders no valid
subject, routing key or topic for is held (said once, never dead-lettered)
until a relay with a template that renders it runs: give one that always
renders, such as 'orders.{{or .Subject "none"}}'.

The webhook's secrets and URL (which may carry a token) and the AMQP URL
(with its password) come from --secret-file, --webhook-url-file and
--amqp-url-file, or from MQLITE_WEBHOOK_SECRET (whitespace-separated),
MQLITE_WEBHOOK_URL and MQLITE_AMQP_URL; --secret, --webhook-url and
--amqp-url work too, but a command line shows in ps. A flag given wins over the environment.
Errors and logs show a webhook URL as scheme://host:port/REDACTED.
Ctrl-C (SIGINT) or SIGTERM stops it: held messages are given back at once,
sends in flight get up to --drain.

Every failed send is a delivery. The relay refuses a queue whose
max-delivery would dead-letter its backlog during a far-side outage shorter
than --outage (1h by default), and says how far to raise it
(mqlite queues update QUEUE --max-delivery N). When the far side has no
stream or queue for a message it says so, with what to create.
--metrics-addr serves the relay's Prometheus metrics at /metrics.

With --from instead of --sink, relay takes the messages of a JetStream
stream (a durable pull consumer), a RabbitMQ queue (manual acks) or Kafka
topics (a consumer group) into the queue of a local file (--db), each once
by its id there (Nats-Msg-Id or <stream>:<seq>; the AMQP message-id;
--id-header or <topic>/<partition>/<offset>), acknowledging the source only
after the commit. It refuses a queue whose dedup window is not longer than
the source's redelivery plus --outage, and says how far to raise it
(mqlite queues update QUEUE --dedup-window D). A message the queue refuses
(no id, an id or header over its limit or not UTF-8, too large) is held
aside in QUEUE.held (--hold-queue), said in the log and the metrics, and
acknowledged; the rest go on.`,
		Example: `  mqlite relay --db app.db --queue events --sink webhook --webhook-url https://hooks.internal/in --secret-file /run/secrets/whsec
  mqlite relay --url http://127.0.0.1:7420 --key $KEY --queue events --sink nats --nats-url nats://127.0.0.1:4222 --metrics-addr 127.0.0.1:9464
  mqlite relay --db app.db --queue inbox --from nats --stream ORDERS --consumer mqlite-inbox`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.resolveSecrets(cmd.Flags(), os.Getenv); err != nil {
				return err
			}
			if err := f.check(); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(g.stderr, nil))
			if f.from != "" {
				if g.url != "" {
					return usagef("--from takes into a local file: give --db, not --url")
				}
				b, err := g.open(cmd.Context(), existingStore)
				if err != nil {
					return err
				}
				return errors.Join(intakeRun(cmd.Context(), b.(local), f, log), b.Close())
			}
			if !cmd.Flags().Changed("retry-for") {
				g.retryFor = client.DefaultMaxElapsed // a long-running relay rides out a broker restart
			}
			b, err := g.open(cmd.Context(), existingStore)
			if err != nil {
				return err
			}
			return errors.Join(relayRun(cmd.Context(), b, f, log), b.Close())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.queue, "queue", "", "the `queue` to relay (required)")
	fs.StringVar(&f.sink, "sink", "", "where to: webhook, nats, amqp or kafka (required, unless --from)")
	fs.IntVar(&f.concurrency, "concurrency", relay.DefaultConcurrency, "sends at once")
	fs.IntVar(&f.max, "batch", relay.DefaultMaxBatch, "messages per send at most")
	fs.DurationVar(&f.drain, "drain", consumer.DefaultDrainTimeout, "how long sends in flight may finish on SIGINT/SIGTERM")
	fs.StringVar(&f.url, "webhook-url", "", "webhook: the endpoint `URL`; shows in ps, with any token in it: prefer --webhook-url-file or "+envWebhookURL)
	fs.StringVar(&f.webhookURLFile, "webhook-url-file", "", "webhook: a `file` holding the endpoint URL")
	fs.StringArrayVar(&f.secrets, "secret", nil, "webhook: a whsec_ signing `secret`; repeat it to sign with several (rotation); shows in ps: prefer --secret-file or "+envWebhookSecret)
	fs.StringArrayVar(&f.secretFiles, "secret-file", nil, "webhook: a `file` of whsec_ signing secrets, one per line (repeat)")
	fs.BoolVar(&f.envelope, "envelope", false, "webhook: POST a JSON envelope of the message instead of its body")
	fs.DurationVar(&f.timeout, "timeout", webhook.DefaultTimeout, "webhook: per-request timeout")
	fs.StringVar(&f.natsURL, "nats-url", natsgo.DefaultURL, "nats: the server `URL`s, comma-separated")
	fs.StringVar(&f.subject, "subject", relaynats.DefaultSubject, "nats: the subject `template`")
	fs.StringVar(&f.amqpURL, "amqp-url", "", "amqp: the broker `URL` (amqp://user:pass@host:5672/); shows in ps: prefer --amqp-url-file or "+envAMQPURL)
	fs.StringVar(&f.amqpURLFile, "amqp-url-file", "", "amqp: a `file` holding the broker URL")
	fs.StringVar(&f.exchange, "exchange", "", "amqp: the `exchange` (empty: the default exchange)")
	fs.StringVar(&f.routingKey, "routing-key", relayamqp.DefaultRoutingKey, "amqp: the routing key `template`")
	fs.StringSliceVar(&f.kafkaBrokers, "kafka-brokers", nil, "kafka: the seed brokers, `host:port`, comma-separated or repeated")
	fs.StringVar(&f.topic, "topic", relaykafka.DefaultTopic, "kafka: the topic `template`")
	fs.DurationVar(&f.outage, "outage", defaultOutage, "the far-side outage the queue's max-delivery must outlast (0: no check); with --from, the stop of the relay its dedup window must outlast")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics (host:port)")
	fs.StringVar(&f.from, "from", "", "take into the queue from: nats, amqp or kafka (instead of --sink)")
	fs.StringVar(&f.stream, "stream", "", "--from nats: the `stream`")
	fs.StringVar(&f.consumer, "consumer", "", "--from nats: the durable consumer's `name` (default mqlite-QUEUE; created when missing)")
	fs.DurationVar(&f.ackWait, "ack-wait", relaynats.DefaultSourceAckWait, "--from nats: the consumer's AckWait")
	fs.StringVar(&f.amqpQueue, "amqp-queue", "", "--from amqp: the RabbitMQ `queue`")
	fs.StringSliceVar(&f.kafkaTopics, "kafka-topic", nil, "--from kafka: the `topic`s, comma-separated or repeated")
	fs.StringVar(&f.group, "group", "", "--from kafka: the consumer group (default mqlite-QUEUE)")
	fs.StringVar(&f.idHeader, "id-header", "", "--from amqp, kafka: a `header` that carries the message's id")
	fs.StringVar(&f.holdQueue, "hold-queue", "", "--from: the `queue` where a message the queue refuses is held aside (default QUEUE.held; created when missing)")
	return cmd
}

// check reports a usage error.
func (f *relayFlags) check() error {
	if f.queue == "" {
		return usagef("relay needs --queue")
	}
	if f.from != "" {
		return f.checkFrom()
	}
	switch f.sink {
	case "webhook":
		if f.url == "" || len(f.secrets) == 0 {
			return usagef("--sink webhook needs its URL (--webhook-url-file, %s or --webhook-url) and at least one secret (--secret-file, %s or --secret)",
				envWebhookURL, envWebhookSecret)
		}
	case "nats":
	case "amqp":
		if f.amqpURL == "" {
			return usagef("--sink amqp needs the broker's URL (--amqp-url-file, %s or --amqp-url)", envAMQPURL)
		}
	case "kafka":
		if len(f.kafkaBrokers) == 0 {
			return usagef("--sink kafka needs --kafka-brokers")
		}
	default:
		return usagef("--sink must be webhook, nats, amqp or kafka, not %q", f.sink)
	}
	return nil
}

// defaultOutage is how long a far side may be down before the relay's
// retries would dead-letter a message, at the least, unless --outage says
// otherwise.
const defaultOutage = time.Hour

// relayRun opens the sink and relays src's queue until ctx is done.
func relayRun(ctx context.Context, src backend, f relayFlags, log *slog.Logger) error {
	maxDelivery := mqlite.DefaultMaxDeliveryCount
	q, err := src.GetQueue(ctx, f.queue)
	switch {
	case err == nil:
		maxDelivery = q.Options.MaxDeliveryCount
		if err := checkOutage(f.queue, maxDelivery, f.outage); err != nil {
			return err
		}
	case errors.Is(err, client.ErrForbidden):
		// A consumer key cannot read the queue's options: assume the default.
		log.Warn("relay: the key cannot read the queue's max-delivery, so it is not checked against --outage", "queue", f.queue)
	default:
		return err
	}
	sink, closeSink, err := openSink(f)
	if err != nil {
		return err
	}
	defer closeSink()
	var observer consumer.Observer = consumer.NopObserver{}
	if f.metricsAddr != "" {
		ro := metrics.NewRelayObserver(nil)
		stop, err := serveMetrics(f.metricsAddr, ro, log)
		if err != nil {
			return err
		}
		defer stop()
		observer = ro.Sink(f.sink)
	}
	r, err := relay.New(src, f.queue, hintSink{Sink: sink, f: f, log: log, once: &sync.Map{}}, relay.Config{
		Concurrency: f.concurrency, MaxBatch: f.max, DrainTimeout: f.drain,
		Logger: log, Observer: deadLetterLog{Observer: observer, log: log, maxDelivery: maxDelivery},
	})
	if err != nil {
		return err
	}
	log.Info("relay: running", "queue", f.queue, "sink", f.sink)
	return runUntilStopped(ctx, log, f.drain, r.Run)
}

// runUntilStopped calls run with ctx, says when ctx ends that it is
// stopping, and logs "relay: stopped" once run returned nil.
func runUntilStopped(ctx context.Context, log *slog.Logger, drain time.Duration, run func(context.Context) error) error {
	said := sayStopping(ctx, log, drain)
	err := run(ctx)
	said()
	if err != nil {
		return err
	}
	log.Info("relay: stopped")
	return nil
}

// sayStopping logs, as soon as ctx ends (SIGINT, SIGTERM), that the relay
// is stopping: a relay holding messages or draining sends must not look
// hung. The returned func waits for the line, or for nothing when ctx has
// not ended: call it once Run returned.
func sayStopping(ctx context.Context, log *slog.Logger, drain time.Duration) (wait func()) {
	returned := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			log.Info("relay: stopping: held messages go back now; sends in flight may finish (up to --drain)", "drain", drain)
		case <-returned:
		}
	}()
	return func() {
		close(returned)
		<-done
	}
}

// retryTime is how long the relay's default backoff keeps retrying a
// message before its last delivery fails: the delays after deliveries 1 to
// maxDelivery-1, without jitter.
func retryTime(maxDelivery int) time.Duration {
	b := consumer.Backoff{Jitter: -1}
	var sum time.Duration
	for n := 1; n < maxDelivery; n++ {
		sum += b.Delay(n)
	}
	return sum
}

// checkOutage refuses a queue whose max-delivery the relay would spend in
// less than outage: a far side down that long would dead-letter the
// backlog. It names the max-delivery that is enough.
func checkOutage(queue string, maxDelivery int, outage time.Duration) error {
	if outage <= 0 || retryTime(maxDelivery) >= outage {
		return nil
	}
	need := maxDelivery
	for retryTime(need) < outage {
		need++
	}
	return fmt.Errorf("queue %s dead-letters a message after %d deliveries, which the relay's retries spend in %v: "+
		"a far side down longer than that would dead-letter the backlog. Raise it: mqlite queues update %s --max-delivery %d "+
		"(outlasts %v), or relay anyway with --outage %v",
		queue, maxDelivery, retryTime(maxDelivery).Round(time.Second), queue, need, outage, retryTime(maxDelivery).Round(time.Second))
}

// serveMetrics serves reg's metrics at http://addr/metrics until stop.
func serveMetrics(addr string, c prometheus.Collector, log *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	log.Info("relay: metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// hintSink logs, once per kind, what to create when the far side has no
// place for a message: a JetStream stream covering the subject, an AMQP
// exchange, or a queue bound to take the routing key. Without it the relay
// only retries, and the log says why in the far side's words.
type hintSink struct {
	relay.Sink
	f    relayFlags
	log  *slog.Logger
	once *sync.Map
}

// Send sends msgs and reads the outcomes for a missing destination.
func (h hintSink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := h.Sink.Send(ctx, msgs)
	for i, o := range out {
		if o.Err == nil || i >= len(msgs) {
			continue
		}
		if kind, hint := destinationHint(h.f, msgs[i], o.Err); hint != "" {
			if _, seen := h.once.LoadOrStore(kind, true); !seen {
				h.log.Error("relay: "+hint, "queue", msgs[i].Queue, "seq", msgs[i].Seq, "cause", o.Err)
			}
		}
	}
	return out
}

// destinationHint says what the far side lacks, given a send's error.
func destinationHint(f relayFlags, m mqlite.Message, err error) (kind, hint string) {
	var ae *amqp091.Error
	switch {
	case errors.Is(err, relay.ErrNoRoute):
		flag, text := templateFlag(f)
		return "template", fmt.Sprintf("the %s template %q renders no valid destination for some messages (seq %d is one): "+
			"relay them with a template that renders every message (a fallback for an empty field: %s in place of %s); "+
			"until then the relay holds them (nothing is dead-lettered)",
			flag, text, m.Seq, "{{or .Subject .Queue}}", "{{.Subject}}")
	case errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse):
		subject := f.subject
		if t, terr := relay.ParseTemplate(f.subject); terr == nil {
			if s, rerr := t.Render(m); rerr == nil {
				subject = s
			}
		}
		return "nats", fmt.Sprintf("no JetStream stream covers the subject %q: create a stream covering it "+
			"(nats stream add %s --subjects %q --defaults); the relay retries until one does", subject, strings.ToUpper(m.Queue), subjectsHint(f.subject, subject))
	case errors.Is(err, relayamqp.ErrReturned):
		return "amqp-route", fmt.Sprintf("RabbitMQ returned the message: no queue is bound to exchange %q for its routing key: "+
			"declare a queue and bind it (with the default exchange, a queue named as the routing key); the relay holds the messages until one is", f.exchange)
	case errors.Is(err, relaykafka.ErrNoTopic):
		topic := f.topic
		if t, terr := relay.ParseTemplate(f.topic); terr == nil {
			if s, rerr := t.Render(m); rerr == nil {
				topic = s
			}
		}
		return "kafka", fmt.Sprintf("Kafka has no topic %q: create it (replication factor 3, min.insync.replicas 2); the relay holds the messages until it exists", topic)
	case errors.Is(err, relayamqp.ErrNoExchange) || errors.As(err, &ae) && ae.Code == amqp091.NotFound:
		return "amqp-exchange", fmt.Sprintf("RabbitMQ has no exchange %q: declare it; the relay holds the messages until it exists", f.exchange)
	}
	return "", ""
}

// subjectsHint is the subjects a stream should cover for the relay's
// subject template text, which rendered subject for one message: the
// template's fixed tokens before its first action followed by ">" (every
// subject the template renders), the subject itself for a template with
// no action, or the rendered subject's first token followed by ".>" when
// the template starts with an action.
func subjectsHint(text, subject string) string {
	i := strings.Index(text, "{{")
	if i < 0 {
		return subject
	}
	if dot := strings.LastIndexByte(text[:i], '.'); dot >= 0 {
		return text[:dot+1] + ">"
	}
	if dot := strings.IndexByte(subject, '.'); dot > 0 {
		return subject[:dot+1] + ">"
	}
	return subject
}

// templateFlag is the flag of the sink's route template, and its text.
func templateFlag(f relayFlags) (flag, text string) {
	switch f.sink {
	case "nats":
		return "--subject", f.subject
	case "kafka":
		return "--topic", f.topic
	}
	return "--routing-key", f.routingKey
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
	case "kafka":
		s, err := relaykafka.New(relaykafka.Config{Brokers: f.kafkaBrokers, Topic: f.topic})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
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
	consumer.Observer // the metrics, or nothing
	log               *slog.Logger
	maxDelivery       int
}

// Rejected logs a message the far side refused.
func (d deadLetterLog) Rejected(m mqlite.Message, took time.Duration, cause error) {
	d.Observer.Rejected(m, took, cause)
	d.logDead(m, cause)
}

// Abandoned logs a message given back on its last allowed delivery.
func (d deadLetterLog) Abandoned(m mqlite.Message, took, delay time.Duration, cause error) {
	d.Observer.Abandoned(m, took, delay, cause)
	if m.DeliveryCount >= d.maxDelivery && cause != nil {
		d.logDead(m, fmt.Errorf("%s: %w", mqlite.ReasonMaxDelivery, cause))
	}
}

// Held passes a hold on to the metrics, which count it.
func (d deadLetterLog) Held(m mqlite.Message, reason string, cause error) {
	if h, ok := d.Observer.(relay.HoldObserver); ok {
		h.Held(m, reason, cause)
	}
}

var _ relay.HoldObserver = deadLetterLog{}

func (d deadLetterLog) logDead(m mqlite.Message, cause error) {
	d.log.Warn("relay: dead-lettered", "queue", m.Queue, "seq", m.Seq, "id", relay.ID(m),
		"delivery_count", m.DeliveryCount, "cause", cause)
}
