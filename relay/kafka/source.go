package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// Defaults of SourceConfig's zero-valued fields (franz-go's own).
const (
	DefaultSessionTimeout   = 45 * time.Second
	DefaultRebalanceTimeout = 60 * time.Second
)

// SourceConfig configures a Source. Zero values mean the defaults.
type SourceConfig struct {
	// Brokers are the brokers the client contacts first, each a host and
	// a port joined by a colon. Required.
	Brokers []string
	// Topics are the topics to read. Required.
	Topics []string
	// Group is the consumer group. Required. A group new to the cluster
	// starts at the topics' first records.
	Group string
	// IDHeader names the header that carries a record's id, such as
	// HeaderID for records the relay's Sink produced. Empty, or a record
	// without it, takes "<topic>/<partition>/<offset>" as the id.
	IDHeader string
	// SessionTimeout is how long the group waits for a silent member
	// before it hands the member's partitions to another. Defaults to 45s.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long a rebalance waits for the members to
	// rejoin. Defaults to 60s.
	RebalanceTimeout time.Duration
	// Options are further franz-go client options (TLS, SASL, a client
	// id, an instance id), applied after the Source's own. Options that
	// turn automatic commits back on break what the Source promises.
	Options []kgo.Opt
}

// Source reads a Kafka consumer group for a relay.Intake, with franz-go.
// Offsets are committed only by Ack, after the intake's commit (automatic
// commits are off); Nack rewinds the partitions to the batch's first
// records. A record's id is its IDHeader header, or
// "<topic>/<partition>/<offset>"; its subject is its topic, its GroupID
// its Mqlite-Group-Id header, its other headers its properties. A Source
// is for one Intake: it is not safe for concurrent use.
type Source struct {
	cfg     SourceConfig
	client  *kgo.Client
	checked bool // the topics were found since the last empty wait
}

var _ relay.Source = (*Source)(nil)

// NewSource returns a Source for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and creates the client, which joins the group
// on the first Fetch. Close it when done.
func NewSource(cfg SourceConfig) (*Source, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, invalid("no Brokers")
	case len(cfg.Topics) == 0:
		return nil, invalid("no Topics")
	case cfg.Group == "":
		return nil, invalid("no Group")
	}
	var err error
	if cfg.SessionTimeout, err = setting.Default("SessionTimeout", cfg.SessionTimeout, DefaultSessionTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	if cfg.RebalanceTimeout, err = setting.Default("RebalanceTimeout", cfg.RebalanceTimeout, DefaultRebalanceTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, cfg.Options...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, invalid("client: %v", err)
	}
	return &Source{cfg: cfg, client: client}, nil
}

// Close leaves the group and closes the client.
func (s *Source) Close() { s.client.Close() }

// Redelivery is SessionTimeout plus RebalanceTimeout: the longest a
// record committed and not acknowledged by a member that went silent
// waits before another member reads it again.
func (s *Source) Redelivery() time.Duration { return s.cfg.SessionTimeout + s.cfg.RebalanceTimeout }

// topicCheck is how long Fetch waits for records before it checks again
// that the topics exist: a consumer of a missing topic only waits.
const topicCheck = 10 * time.Second

// Fetch waits for records and returns up to max. A topic that does not
// exist is relay.Gone ("no_topic"): checked on the first Fetch and after
// each wait of 10s that brought nothing.
func (s *Source) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	for {
		if !s.checked {
			if err := s.checkTopics(ctx); err != nil {
				return nil, err
			}
			s.checked = true
		}
		pctx, cancel := context.WithTimeout(ctx, topicCheck)
		fs := s.client.PollRecords(pctx, max)
		waited := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var errs []error
		for _, fe := range fs.Errors() {
			switch {
			case errors.Is(fe.Err, kgo.ErrClientClosed):
				return nil, fmt.Errorf("kafka: %w", fe.Err)
			case errors.Is(fe.Err, kerr.UnknownTopicOrPartition), errors.Is(fe.Err, kerr.UnknownTopicID):
				s.checked = false
				return nil, relay.Gone("no_topic", fmt.Errorf("kafka: topic %s: %w", fe.Topic, fe.Err))
			case errors.Is(fe.Err, context.Canceled), errors.Is(fe.Err, context.DeadlineExceeded):
			default:
				errs = append(errs, fmt.Errorf("kafka: fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err))
			}
		}
		recs := fs.Records()
		if len(recs) > 0 {
			out := make([]relay.Inbound, len(recs))
			for i, r := range recs {
				out[i] = s.inbound(r)
			}
			return out, nil
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if waited {
			s.checked = false
		}
	}
}

// checkTopics returns relay.Gone when a topic of the config does not
// exist.
func (s *Source) checkTopics(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range s.cfg.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return fmt.Errorf("kafka: metadata: %w", err)
	}
	for i, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.UnknownTopicOrPartition) {
			name := s.cfg.Topics[min(i, len(s.cfg.Topics)-1)]
			if t.Topic != nil {
				name = *t.Topic
			}
			return relay.Gone("no_topic", fmt.Errorf("kafka: topic %s: %w", name, err))
		}
	}
	return nil
}

// inbound is the relay.Inbound of r.
func (s *Source) inbound(r *kgo.Record) relay.Inbound {
	in := relay.Inbound{Message: outbox.Message{Body: r.Value, Subject: r.Topic}, Time: r.Timestamp, Ref: r,
		Origin: fmt.Sprintf("topic %s partition %d offset %d", r.Topic, r.Partition, r.Offset)}
	for _, h := range r.Headers {
		switch h.Key {
		case s.cfg.IDHeader:
			in.MessageID = string(h.Value)
		case relay.HeaderGroupID:
			in.GroupID = string(h.Value)
		default:
			if in.Properties == nil {
				in.Properties = map[string]string{}
			}
			in.Properties[h.Key] = string(h.Value)
		}
	}
	if in.MessageID == "" {
		in.MessageID = fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
	}
	return in
}

func records(msgs []relay.Inbound) []*kgo.Record {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = m.Ref.(*kgo.Record)
	}
	return recs
}

// Ack commits the offsets past msgs.
func (s *Source) Ack(ctx context.Context, msgs []relay.Inbound) error {
	if err := s.client.CommitRecords(ctx, records(msgs)...); err != nil {
		return fmt.Errorf("kafka: commit offsets: %w", err)
	}
	return nil
}

// Nack rewinds each partition of msgs to its first record in msgs, so
// that the next Fetch reads them again.
func (s *Source) Nack(_ context.Context, msgs []relay.Inbound) error {
	at := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range records(msgs) {
		parts := at[r.Topic]
		if parts == nil {
			parts = map[int32]kgo.EpochOffset{}
			at[r.Topic] = parts
		}
		if o, ok := parts[r.Partition]; !ok || r.Offset < o.Offset {
			parts[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		}
	}
	s.client.SetOffsets(at)
	return nil
}
