package client_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/conformance"
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
	conformance.Run(t, conformance.Harness{
		Features: conformance.Features{
			WithoutRollback: "a send over the broker is its own transaction; the caller's rollback is the embedded store's promise",
			WithoutRestart:  "the broker owns the file; a killed broker is TestBrokerCrash's (crash_injection)",
			WithoutBubble:   "the client does network I/O, which a synctest bubble cannot hold",
			WithoutEffects:  "the broker has no request yet that settles and sends in one transaction",
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
			if fake != nil {
				in.Clock = fake
			}
			return in
		},
	})
}
