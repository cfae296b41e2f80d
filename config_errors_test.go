package mqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/webhook"
)

// TestBadConfigIsInvalidArgument: bad configuration is one error family.
// Every constructor and options check of the root module's packages refuses
// a bad value with an error that errors.Is matches to
// mqlite.ErrInvalidArgument, and to the package's own older name where it
// has one (broker.ErrInvalidConfig, client.ErrInvalidConfig, webhook.ErrInvalidConfig).
// The NATS and RabbitMQ sinks, in modules of their own, check theirs in
// TestNewValidates (relay/nats, relay/amqp).
func TestBadConfigIsInvalidArgument(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	nop := func(context.Context, mqlite.Message) error { return nil }
	batchNop := func(context.Context, []mqlite.Message) []error { return nil }
	for _, tc := range []struct {
		name string
		err  func() error
		also error // the package's own name, when it has one
	}{
		{"mqlite.Open", func() error {
			_, err := mqlite.Open(context.Background(), t.TempDir()+"/x.db", mqlite.Config{MaxMessageBytes: -5})
			return err
		}, nil},
		{"Store.CreateQueue", func() error {
			return b.Store.CreateQueue(context.Background(), "r", mqlite.QueueOptions{LockDuration: -1})
		}, mqlite.ErrInvalidLockDuration},
		{"consumer.Loop", func() error {
			return consumer.Loop(context.Background(), b.Store, "q", nop, consumer.LoopConfig{Concurrency: -1})
		}, nil},
		{"consumer.LoopBatch", func() error {
			return consumer.LoopBatch(context.Background(), b.Store, "q", batchNop, consumer.BatchConfig{MaxBatch: -1})
		}, nil},
		{"relay.New", func() error {
			_, err := relay.New(b.Store, "q", nil, relay.Config{})
			return err
		}, nil},
		{"webhook.New", func() error {
			_, err := webhook.New(webhook.Config{URL: "ftp://example.invalid"})
			return err
		}, webhook.ErrInvalidConfig},
		{"broker.New", func() error {
			_, err := broker.New(broker.Config{})
			return err
		}, broker.ErrInvalidConfig},
		{"client.New", func() error {
			_, err := client.New(client.Config{URL: "ftp://example.invalid"})
			return err
		}, client.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Errorf("%v: does not match mqlite.ErrInvalidArgument", err)
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Errorf("%v: does not match %v", err, tc.also)
			}
		})
	}
}
