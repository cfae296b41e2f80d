package client_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/conformance"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestConformance runs the behavioural kit over the network: the Store under
// test is a client.Client talking to a broker on an httptest server, over a
// fresh embedded store per subtest (loops off, the fake clock shared by the
// store and the client). What the kit's Features switch off is what a
// network client cannot offer, each for the reason written beside it.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, clientHarness(effectsInBatch))
}

// clientHarness is the kit's harness over a client.Client; fx says how the
// Effects area's transactions commit.
func clientHarness(fx func(c *client.Client) effects) conformance.Harness {
	return conformance.Harness{
		Features: conformance.Features{
			WithoutRollback: "a send over the broker is its own transaction; the caller's rollback is the embedded store's promise",
			WithoutRestart:  "the broker owns the file; a killed broker is TestBrokerCrash's (crash_injection)",
			WithoutBubble:   "the client does network I/O, which a synctest bubble cannot hold",
		},
		Open: func(t *testing.T, cfg conformance.Config) conformance.Instance {
			var fake *testdb.Clock
			var clock mqlite.Clock = mqlite.SystemClock{}
			if !cfg.WallClock {
				fake = testdb.NewClock()
				clock = fake
			}
			st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
				Clock: clock, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
				JanitorInterval: -1, RetentionInterval: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() }) // after the broker's shutdown, registered below
			url, key := serve(t, &testdb.Bundle{Store: st}, broker.Config{})
			c := newClient(t, url, key, clock)
			in := conformance.Instance{
				Store: c,
				Tx: func(ctx context.Context, fn func(conformance.SendFunc) error) error {
					return fn(func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
						return c.SendBatch(ctx, queue, msgs)
					})
				},
			}
			in.EffectsTx, in.EffectsRetry = fx(c)()
			// The broker's inbound route, on a broker over the same store
			// with the sources in its Config (they are read at its start).
			in.Inbound = func(t *testing.T, sources []inbound.Sender) (http.Handler, error) {
				srv, err := broker.New(broker.Config{Store: st, Inbound: sources})
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
				return srv.Handler(), nil
			}
			if fake != nil {
				in.Clock = fake
			}
			return in
		},
	}
}

// effects returns conformance.Instance's EffectsTx and EffectsRetry.
type effects func() (tx func(context.Context, func(conformance.EffectsOps) error) error, retry func(context.Context) error)

// effectsInBatch stages what fn sends and settles in one client.Batch and
// commits it with Client.Commit: one request, one transaction on the
// broker. EffectsRetry commits the last Batch again, with its key.
func effectsInBatch(c *client.Client) effects {
	return func() (func(context.Context, func(conformance.EffectsOps) error) error, func(context.Context) error) {
		var (
			mu   sync.Mutex // the GroupCommit area runs transactions at once
			last *client.Batch
		)
		tx := func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
			b := new(client.Batch)
			if err := fn(stage(ctx, b)); err != nil {
				return err
			}
			if _, err := c.Commit(ctx, b); err != nil {
				return err
			}
			mu.Lock()
			last = b
			mu.Unlock()
			return nil
		}
		retry := func(ctx context.Context) error {
			mu.Lock()
			b := last
			mu.Unlock()
			res, err := c.Commit(ctx, b)
			if err == nil && !res.Replayed {
				return errors.New("the commit again was not answered as a replay")
			}
			return err
		}
		return tx, retry
	}
}

// stage is the EffectsOps that stage in b: Send's results stay zero until
// the commit.
func stage(ctx context.Context, b *client.Batch) conformance.EffectsOps {
	return conformance.EffectsOps{
		Send: func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
			return make([]outbox.Result, len(msgs)), b.Send(ctx, queue, msgs...)
		},
		Complete: b.Complete,
		Reject:   b.Reject,
	}
}
