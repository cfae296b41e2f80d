package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// LoopTx's tests run in Loop's synctest bubble. Each message's step writes
// one effect row and sends one message onward to queue "out": both must
// exist exactly when the message is completed.

// startTx runs LoopTx on queue "q" of e's store in the background, with
// an effects table and an "out" queue made first.
func (e *loopEnv) startTx(h consumer.TxHandler, opts consumer.LoopConfig) (stop func() error) {
	e.t.Helper()
	_, err := e.st.DB().ExecContext(ctx, `CREATE TABLE effects (seq INTEGER PRIMARY KEY)`)
	must(e.t, err)
	must(e.t, e.st.CreateQueue(ctx, "out", mqlite.QueueOptions{}))
	opts = e.options(opts)
	return e.launch(func(lctx context.Context) error { return consumer.LoopTx(lctx, e.st, "q", h, opts) })
}

// effect is the step that writes m's effect row and sends it onward.
func effect(m mqlite.Message) consumer.TxStep {
	return func(ctx context.Context, tx consumer.Tx) error {
		sqlTx, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		if _, err := sqlTx.ExecContext(ctx, `INSERT INTO effects (seq) VALUES (?)`, m.Seq); err != nil {
			return err
		}
		return tx.Send(ctx, "out", outbox.Message{Body: m.Body, MessageID: fmt.Sprintf("from-%d", m.Seq)})
	}
}

// effects returns how many effect rows and onward messages message seq
// left.
func (e *loopEnv) effects(seq int64) (rows, onward int64) {
	e.t.Helper()
	rows = testdb.Int(e.t, e.st.DB(), `SELECT count(*) FROM effects WHERE seq = ?`, seq)
	onward = testdb.Int(e.t, e.st.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = 'out' AND message_id = ?`,
		fmt.Sprintf("from-%d", seq))
	return rows, onward
}

func TestLoopTxOutcomes(t *testing.T) {
	boom := errors.New("downstream said no")
	tests := []struct {
		name    string
		handler consumer.TxHandler
		// event is the Observer's event for the message, effect whether
		// its row and onward message exist, state what is left of it.
		event  string
		effect bool
		state  mqlite.State
		cause  func(error) bool
	}{
		{"nil", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) { return effect(m), nil },
			"completed", true, "", nil},
		{"nil step", func(context.Context, mqlite.Message) (consumer.TxStep, error) { return nil, nil },
			"completed", false, "", nil},
		{"handler error", func(context.Context, mqlite.Message) (consumer.TxStep, error) { return nil, boom },
			"abandoned", false, mqlite.StateScheduled, func(err error) bool { return errors.Is(err, boom) }},
		{"step error", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				if err := effect(m)(ctx, tx); err != nil {
					return err
				}
				return boom
			}, nil
		}, "abandoned", false, mqlite.StateScheduled, func(err error) bool { return errors.Is(err, boom) }},
		{"step permanent", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				if err := effect(m)(ctx, tx); err != nil {
					return err
				}
				return consumer.Permanent(boom)
			}, nil
		}, "rejected", false, mqlite.StateDeadLettered, func(err error) bool { return errors.Is(err, boom) }},
		{"step panic", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				if err := effect(m)(ctx, tx); err != nil {
					return err
				}
				panic("step blew up")
			}, nil
		}, "abandoned", false, mqlite.StateScheduled, func(err error) bool {
			pe, ok := errors.AsType[*consumer.PanicError](err)
			return ok && pe.Value == "step blew up"
		}},
		{"handler panic", func(context.Context, mqlite.Message) (consumer.TxStep, error) { panic("handler blew up") },
			"abandoned", false, mqlite.StateScheduled, func(err error) bool {
				_, ok := errors.AsType[*consumer.PanicError](err)
				return ok
			}},
		// A programming error: dead-lettered on its first delivery, and
		// LoopTx stops with it.
		{"step commits itself", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error { return sqlOf(tx).Commit() }, nil
		}, "rejected", false, mqlite.StateDeadLettered, func(err error) bool { return errors.Is(err, consumer.ErrTxEnded) }},
		{"step rolls back itself", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				if err := effect(m)(ctx, tx); err != nil {
					return err
				}
				return sqlOf(tx).Rollback()
			}, nil
		}, "rejected", false, mqlite.StateDeadLettered, func(err error) bool { return errors.Is(err, consumer.ErrTxEnded) }},
		{"step passes no transaction", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, _ consumer.Tx) error {
				_, err := outbox.SendOne(ctx, nil, "out", outbox.Message{Body: m.Body})
				return err
			}, nil
		}, "rejected", false, mqlite.StateDeadLettered, func(err error) bool { return errors.Is(err, mqlite.ErrNilTx) }},
		// What the step wrote refused as invalid: that message is
		// dead-lettered on its first delivery; LoopTx goes on.
		{"step sends an invalid message", func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				if err := effect(m)(ctx, tx); err != nil {
					return err
				}
				return tx.Send(ctx, "out", outbox.Message{Body: m.Body, MessageID: strings.Repeat("x", mqlite.MaxMessageIDLen+1)})
			}, nil
		}, "rejected", false, mqlite.StateDeadLettered, func(err error) bool { return errors.Is(err, mqlite.ErrInvalidArgument) }},
	}
	// What LoopTx returns (errors.Is): a programming error stops it.
	stops := map[string]error{
		"step commits itself":        consumer.ErrTxEnded,
		"step rolls back itself":     consumer.ErrTxEnded,
		"step passes no transaction": mqlite.ErrNilTx,
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
				stop := e.startTx(tc.handler, consumer.LoopConfig{Backoff: exact})
				seq := e.send("m")[0]
				synctest.Wait()
				if err, want := stop(), stops[tc.name]; want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Fatalf("LoopTx returned %v, want %v", err, want)
				}
				wantEvents(t, e.obs, "received 1", fmt.Sprintf("%s %d", tc.event, seq))
				if tc.cause != nil && !tc.cause(e.obs.causeAt(1)) {
					t.Fatalf("cause %v", e.obs.causeAt(1))
				}
				rows, onward := e.effects(seq)
				if want := map[bool]int64{true: 1}[tc.effect]; rows != want || onward != want {
					t.Fatalf("%d effect rows and %d onward messages, want %d of each", rows, onward, want)
				}
				state := mqlite.State("")
				if m, ok := e.peek()[seq]; ok {
					state = m.State
				}
				dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
				must(t, err)
				if len(dead) == 1 && dead[0].Seq == seq {
					state = dead[0].State
				}
				if state != tc.state {
					t.Fatalf("message left %q, want %q", state, tc.state)
				}
			})
		})
	}
}

// TestLoopTxLeaseLapsedBeforeTheTransaction is the test of the completion
// inside the step's transaction: the step outlives the lease, so the
// completion finds it lapsed; the effect must not commit. A completion
// made after the transaction committed would leave the effect behind.
func TestLoopTxLeaseLapsedBeforeTheTransaction(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		stop := e.startTx(func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				time.Sleep(lease) // fake time: nothing renews while the step runs
				return effect(m)(ctx, tx)
			}, nil
		}, consumer.LoopConfig{SettleTimeout: 2 * lease})
		seq := e.send("m")[0]
		synctest.Wait()
		must(t, stop())
		wantEvents(t, e.obs, "received 1", fmt.Sprintf("lock lost %d", seq))
		if err := e.obs.causeAt(1); !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", err)
		}
		if rows, onward := e.effects(seq); rows != 0 || onward != 0 {
			t.Fatalf("%d effect rows and %d onward messages committed with a lapsed lease, want none", rows, onward)
		}
	})
}

// TestLoopTxOneMessageOnce drains messages through LoopTx with
// concurrent handlers: every message completed, each with one effect row
// and one onward message.
func TestLoopTxOneMessageOnce(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		stop := e.startTx(func(_ context.Context, m mqlite.Message) (consumer.TxStep, error) {
			return effect(m), nil
		}, consumer.LoopConfig{Concurrency: 4})
		seqs := e.send(strings.Split("a b c d e f g h i j", " ")...)
		synctest.Wait()
		must(t, stop())
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("%d messages left, want 0", len(left))
		}
		for _, seq := range seqs {
			if rows, onward := e.effects(seq); rows != 1 || onward != 1 {
				t.Fatalf("message %d: %d effect rows and %d onward messages, want 1 of each", seq, rows, onward)
			}
		}
	})
}

func TestLoopTxBadArguments(t *testing.T) {
	t.Parallel()
	b := testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
	h := func(context.Context, mqlite.Message) (consumer.TxStep, error) { return nil, nil }
	tests := []struct {
		name string
		src  consumer.Store
		h    consumer.TxHandler
		opts consumer.LoopConfig
	}{
		{"nil store", nil, h, consumer.LoopConfig{}},
		{"nil handler", b.Store, nil, consumer.LoopConfig{}},
		{"store without transactions", oneByOne{b.Store}, h, consumer.LoopConfig{}},
		{"bad config", b.Store, h, consumer.LoopConfig{Concurrency: -2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := consumer.LoopTx(ctx, tc.src, "q", tc.h, tc.opts); !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("LoopTx: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// sqlOf is the step's *sql.Tx on the store, which LoopTx over a store
// always has.
func sqlOf(tx consumer.Tx) *sql.Tx {
	sqlTx, err := consumer.SQL(tx)
	if err != nil {
		panic(err)
	}
	return sqlTx
}

// TestLoopTxStopClaimsNothingAhead: a LoopTx that stops while a handler
// runs commits that message without claiming the next in the same commit,
// which it could only give back with a delivery spent: on a queue of
// MaxDeliveryCount 1 a dead letter per stop. The messages left are
// untouched (fails with the commit claiming while stopping: the next
// message dead-lettered, "abandoned on the last allowed delivery").
func TestLoopTxStopClaimsNothingAhead(t *testing.T) {
	bubble(t, mqlite.QueueOptions{MaxDeliveryCount: 1}, func(t *testing.T, e *loopEnv) {
		var handled atomic.Int64
		stop := e.startTx(func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
			handled.Add(1)
			<-ctx.Done() // the drain's end: Loop is stopping
			return effect(m), nil
		}, consumer.LoopConfig{Prefetch: -1, DrainTimeout: -1})
		seqs := e.send("a", "b", "c")
		synctest.Wait() // the handler of "a" runs; "b" and "c" wait in the queue
		must(t, stop())
		if n := handled.Load(); n != 1 {
			t.Fatalf("%d handlers ran, want 1", n)
		}
		if rows, onward := e.effects(seqs[0]); rows != 1 || onward != 1 {
			t.Fatalf("the running message left %d effect rows and %d onward messages, want 1 of each", rows, onward)
		}
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		if len(dead) != 0 {
			t.Fatalf("dead letters after the stop: %v (%s)", testdb.Seqs(dead), dead[0].DeadLetterDescription)
		}
		left := e.peek()
		for _, seq := range seqs[1:] {
			if m, ok := left[seq]; !ok || m.DeliveryCount != 0 || m.State != mqlite.StateActive {
				t.Fatalf("message %d left %+v, want it active with no delivery spent", seq, m)
			}
		}
	})
}
