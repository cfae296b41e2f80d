package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of LoopTx's programming errors on the embedded store,
// from its doc comment: each stops LoopTx at once with that error, the
// message dead-lettered on that delivery, and no handler's external call
// repeated; whether the handler, the step or the commit returns it.
func TestOutsideLoopTxProgrammingErrors(t *testing.T) {
	cases := map[string]struct {
		want    error
		handler func(st *mqlite.Store) consumer.TxHandler
	}{
		"the handler returns ErrNoSQL": {consumer.ErrNoSQL, func(*mqlite.Store) consumer.TxHandler {
			return func(context.Context, mqlite.Message) (consumer.TxStep, error) {
				return nil, fmt.Errorf("orders: %w", consumer.ErrNoSQL)
			}
		}},
		"the step commits the transaction": {consumer.ErrTxEnded, func(*mqlite.Store) consumer.TxHandler {
			return func(context.Context, mqlite.Message) (consumer.TxStep, error) {
				return func(ctx context.Context, tx consumer.Tx) error {
					s, err := consumer.SQL(tx)
					if err != nil {
						return err
					}
					return s.Commit()
				}, nil
			}
		}},
		"the step calls the store": {mqlite.ErrInsideTx, func(st *mqlite.Store) consumer.TxHandler {
			return func(context.Context, mqlite.Message) (consumer.TxStep, error) {
				return func(ctx context.Context, tx consumer.Tx) error {
					_, err := st.Stats(ctx, "in")
					return err
				}, nil
			}
		}},
		"the step sends with a nil tx": {mqlite.ErrNilTx, func(*mqlite.Store) consumer.TxHandler {
			return func(context.Context, mqlite.Message) (consumer.TxStep, error) {
				return func(ctx context.Context, tx consumer.Tx) error {
					_, err := outbox.SendOne(ctx, nil, "in", outbox.Message{Body: []byte("x")})
					return err
				}, nil
			}
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, _ := mqlitetest.NewStore(t, mqlite.Config{})
			// One delivery each: a message LoopTx claimed ahead and never
			// handed to a handler must not spend it.
			mustDo(t, st.CreateQueue(ctx, "in", mqlite.QueueOptions{MaxDeliveryCount: 1}))
			for i := range 10 {
				_, err := outbox.Send(ctx, st, "in", outbox.Message{Body: []byte(fmt.Sprint(i))})
				mustDo(t, err)
			}
			var mu sync.Mutex
			calls := map[int64]int{}
			inner := c.handler(st)
			err := consumer.LoopTx(ctx, st, "in", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
				mu.Lock()
				calls[m.Seq]++
				mu.Unlock()
				return inner(ctx, m)
			}, consumer.LoopConfig{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if !errors.Is(err, c.want) {
				t.Fatalf("LoopTx: %v, want %v", err, c.want)
			}
			mu.Lock()
			defer mu.Unlock()
			for seq, n := range calls {
				if n != 1 {
					t.Errorf("message %d: %d handler calls, want 1", seq, n)
				}
			}
			dead, err := st.PeekDeadLetters(ctx, "in", mqlite.PeekParams{})
			mustDo(t, err)
			if len(dead) == 0 || len(dead) > len(calls) {
				t.Errorf("%d dead letters for %d handler calls, want 1 to %d", len(dead), len(calls), len(calls))
			}
			s, err := st.Stats(ctx, "in")
			mustDo(t, err)
			t.Logf("handler calls %d, dead letters %d, left %d", len(calls), len(dead), s.Active)
			if s.Active+int64(len(dead)) != 10 {
				t.Errorf("%d left and %d dead letters of 10: a message was completed or lost", s.Active, len(dead))
			}
			left, err := st.Peek(ctx, "in", mqlite.PeekParams{Max: 10})
			mustDo(t, err)
			for _, m := range left {
				if m.State == mqlite.StateActive && m.DeliveryCount != 0 {
					t.Errorf("message %d never handled: delivery count %d, want 0", m.Seq, m.DeliveryCount)
				}
			}
		})
	}
}
