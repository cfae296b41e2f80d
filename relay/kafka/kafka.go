// Package kafka is a relay.Sink that produces to Apache Kafka with
// franz-go, and a relay.Source (NewSource) that reads a consumer group
// into a queue through relay.Intake. It is a module of its own (github.com/mqlite/mqlite/relay/kafka),
// so that mqlite's module does not depend on a Kafka client.
//
// Every message is produced with acks from all in-sync replicas and the
// idempotent producer (franz-go's defaults, which New keeps), its GroupID
// as the record key, so that one group's messages land on one partition in
// order (the relay sends one message per group at a time), its stable id
// (relay.ID) as the HeaderID header, the same on every retry, its fields as
// Mqlite-* headers, its properties as headers of their own names and its
// W3C Trace Context as traceparent/tracestate headers.
//
// A message is reported delivered once the broker acknowledged it. A
// produce that fails for a reason of the far side (a broker down, a leader
// moving, a timeout: Config.DeliveryTimeout) is retried; a record the
// broker refuses for good (too large, an invalid topic name) is
// dead-lettered with the reason; a topic that does not exist holds the
// messages (relay.Hold) until it does.
//
// An acknowledgement lost on the wire leaves no copy: the idempotent
// producer sends the batch again with the same sequence numbers and the
// broker keeps one. Kafka does not drop a copy that the relay itself sends
// again (a relay that died after the produce and before completing the
// message, or a record that timed out): it has the same HeaderID and key,
// so it lands on the same partition after the first, and consumers drop
// the ids they have seen, by HeaderID.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/relay"
)

// HeaderID is the header that carries a message's stable id, relay.ID.
const HeaderID = "Mqlite-Id"

// Defaults of Config's zero-valued fields.
const (
	DefaultTopic           = "{{.Queue}}"
	DefaultDeliveryTimeout = 30 * time.Second
)

// ErrInvalidConfig is matched, together with mqlite.ErrInvalidArgument, by
// every error of New.
var ErrInvalidConfig = errors.New("kafka: invalid config")

// ErrNoTopic is the cause of a hold: the topic does not exist.
var ErrNoTopic = errors.New("kafka: no such topic (the relay holds its messages until it exists)")

// Config configures a Sink. Zero values mean the defaults.
type Config struct {
	// Brokers are the brokers the client contacts first (Kafka's bootstrap
	// servers), each a host and a port joined by a colon. Required.
	Brokers []string
	// Topic is a relay.Template that names each message's topic, such as
	// "orders.{{.Subject}}". Defaults to "{{.Queue}}". A message whose
	// topic renders empty is held (relay.Unrenderable): the template is
	// the operator's to fix, so no dead letter records it.
	Topic string
	// DeliveryTimeout bounds the wait for a record's acknowledgement
	// (franz-go's RecordDeliveryTimeout); the message is retried after it.
	// Defaults to 30s.
	DeliveryTimeout time.Duration
	// Options are further franz-go client options (TLS, SASL, a client
	// id), applied after the sink's own. Options that give up acks from
	// all replicas or the idempotent producer break what the sink promises.
	Options []kgo.Opt
}

// Sink produces messages to Kafka over one franz-go client. It is safe
// for concurrent use.
type Sink struct {
	cfg    Config
	topic  *relay.Template
	client *kgo.Client
}

var _ relay.Sink = (*Sink)(nil)

// New returns a Sink for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and creates the client, which connects on the
// first Send. Close it when done.
func New(cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, invalid("no Brokers")
	}
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	topic, err := relay.ParseTemplate(cfg.Topic)
	if err != nil {
		return nil, invalid("Topic: %v", err)
	}
	if cfg.DeliveryTimeout, err = setting.Default("DeliveryTimeout", cfg.DeliveryTimeout, DefaultDeliveryTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
		// A missing topic fails its records after a few metadata loads, so
		// that the relay can hold them (and say why) instead of waiting in
		// the client's buffer for ever.
		kgo.UnknownTopicRetries(4),
	}, cfg.Options...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, invalid("client: %v", err)
	}
	return &Sink{cfg: cfg, topic: topic, client: client}, nil
}

// Close closes the client. Sends after Close fail.
func (s *Sink) Close() { s.client.Close() }

// Send produces msgs and waits for each acknowledgement. Cancelling ctx
// stops waiting: the messages not yet acknowledged are retried (a record
// already on the wire may still be written; its copy carries the same id).
func (s *Sink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	pending := make([]bool, len(msgs))
	done := make(chan result, len(msgs)) // room for every promise: none blocks after Send returns
	waiting := 0
	for i, m := range msgs {
		r, err := s.record(m)
		if err != nil {
			out[i] = relay.Unrenderable(fmt.Errorf("kafka: topic: %w", err))
			continue
		}
		pending[i] = true
		waiting++
		s.client.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- result{i, err} })
	}
	for ; waiting > 0; waiting-- {
		select {
		case r := <-done:
			out[r.i], pending[r.i] = outcome(r.err), false
		case <-ctx.Done():
			for i := range out {
				if pending[i] {
					out[i] = relay.RetryAfter(fmt.Errorf("kafka: %w", ctx.Err()), 0)
				}
			}
			return out
		}
	}
	return out
}

// result is one record's acknowledgement, or its failure.
type result struct {
	i   int
	err error
}

// outcome classifies a produce result.
func outcome(err error) relay.Outcome {
	switch {
	case err == nil:
		return relay.Delivered()
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return relay.Hold("no_topic", fmt.Errorf("%w: %w", ErrNoTopic, err))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return relay.DeadLetter("kafka: message too large", err.Error())
	case errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.TopicAuthorizationFailed):
		return relay.DeadLetter("kafka: topic refused", err.Error())
	}
	return relay.RetryAfter(fmt.Errorf("kafka: produce: %w", err), 0)
}

// record builds the Kafka record of m.
func (s *Sink) record(m mqlite.Message) (*kgo.Record, error) {
	topic, err := s.topic.Render(m)
	if err != nil {
		return nil, err
	}
	if topic == "" || strings.ContainsAny(topic, " \t\r\n/") {
		return nil, fmt.Errorf("topic %q is not a valid Kafka topic", topic)
	}
	r := &kgo.Record{Topic: topic, Value: m.Body}
	if m.GroupID != "" {
		r.Key = []byte(m.GroupID)
	}
	// The record's timestamp stays franz-go's (now): the client counts
	// DeliveryTimeout from it, so a message enqueued long ago would time
	// out at once.
	add := func(k, v string) { r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(HeaderID, relay.ID(m))
	add(relay.HeaderQueue, m.Queue)
	add(relay.HeaderSeq, strconv.FormatInt(m.Seq, 10))
	add(relay.HeaderDeliveryCount, strconv.Itoa(m.DeliveryCount))
	if m.Subject != "" {
		add(relay.HeaderSubject, m.Subject)
	}
	if m.GroupID != "" {
		add(relay.HeaderGroupID, m.GroupID)
	}
	for k, v := range m.Properties {
		// The trace context goes on below, checked; the Mqlite-* names are
		// the sink's own.
		if k != "traceparent" && k != "tracestate" && !strings.HasPrefix(k, "Mqlite-") {
			add(k, v)
		}
	}
	relay.TraceContext(m, add)
	return r, nil
}

func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}
