package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// lease is the LockDuration of the kit's queues unless a subtest says
// otherwise.
const lease = 30 * time.Second

// replayWindow is how long a settlement receipt and a receive attempt
// replay: about 30 minutes (docs/conformance.md, "Settlement receipts").
const replayWindow = 30 * time.Minute

// kit is one subtest's implementation and the helpers the subtests share
// (River's testBundle). Its helpers fail the subtest on an unexpected error.
type kit struct {
	t     *testing.T
	in    Instance
	st    Store
	ctx   context.Context
	clock Clock
	n     atomic.Int64 // for unique bodies
}

// optional returns k's store as T, an interface the kit tests only where
// the implementation has it (named what), or skips the subtest.
func optional[T any](k *kit, what string) T {
	k.t.Helper()
	v, ok := k.st.(T)
	if !ok {
		k.t.Skip("the store is not a " + what)
	}
	return v
}

// skipWithout skips t when reason (a Features field) says the
// implementation lacks what the subtest needs.
func skipWithout(t *testing.T, reason string) {
	t.Helper()
	if reason != "" {
		t.Skip(reason)
	}
}

// open returns a fresh implementation from h for t, on the fake clock.
func open(t *testing.T, h Harness) *kit {
	t.Helper()
	return openWith(t, h, Config{})
}

func openWith(t *testing.T, h Harness, cfg Config) *kit {
	t.Helper()
	in := h.Open(t, cfg)
	if in.Store == nil || in.Tx == nil {
		t.Fatal("conformance: Harness.Open returned an Instance without Store or Tx")
	}
	if !cfg.WallClock && in.Clock == nil {
		t.Fatal("conformance: Harness.Open returned no fake Clock")
	}
	return &kit{t: t, in: in, st: in.Store, ctx: context.Background(), clock: in.Clock}
}

// queue creates queue name with opts; a zero LockDuration becomes lease.
func (k *kit) queue(name string, opts mqlite.QueueOptions) {
	k.t.Helper()
	if opts.LockDuration == 0 {
		opts.LockDuration = lease
	}
	if err := k.st.CreateQueue(k.ctx, name, opts); err != nil {
		k.t.Fatalf("create queue %s: %v", name, err)
	}
}

// update replaces the options of queue name; a zero LockDuration becomes
// lease.
func (k *kit) update(name string, opts mqlite.QueueOptions) {
	k.t.Helper()
	if opts.LockDuration == 0 {
		opts.LockDuration = lease
	}
	if err := k.st.UpdateQueue(k.ctx, name, opts); err != nil {
		k.t.Fatalf("update queue %s: %v", name, err)
	}
}

// body returns a body no other message of the subtest has, so that content
// keys never de-duplicate by accident.
func (k *kit) body() []byte { return fmt.Appendf(nil, "body-%d", k.n.Add(1)) }

// sendAll sends msgs to queue in one committed transaction and returns the
// results and the error of the whole call. A nil Body gets a unique one.
func (k *kit) sendAll(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
	k.t.Helper()
	for i := range msgs {
		if msgs[i].Body == nil {
			msgs[i].Body = k.body()
		}
	}
	var res []outbox.Result
	err := k.in.Tx(k.ctx, func(send SendFunc) error {
		var err error
		res, err = send(queue, msgs...)
		return err
	})
	return res, err
}

// send sends msgs to queue in one committed transaction and returns their
// sequence numbers; any error, a slot's included, fails the subtest.
func (k *kit) send(queue string, msgs ...outbox.Message) []int64 {
	k.t.Helper()
	res, err := k.sendAll(queue, msgs...)
	if err != nil {
		k.t.Fatalf("send to %s: %v", queue, err)
	}
	seqs := make([]int64, len(res))
	for i, r := range res {
		if r.Err != nil {
			k.t.Fatalf("send to %s, message %d: %v", queue, i, r.Err)
		}
		seqs[i] = r.Seq
	}
	return seqs
}

// sendN sends n messages with unique bodies to queue.
func (k *kit) sendN(queue string, n int) []int64 {
	k.t.Helper()
	return k.send(queue, make([]outbox.Message, n)...)
}

// receive claims from queue with opts and fails on error.
func (k *kit) receive(queue string, opts mqlite.ReceiveOptions) []mqlite.Message {
	k.t.Helper()
	msgs, err := k.st.Receive(k.ctx, queue, opts)
	if err != nil {
		k.t.Fatalf("receive from %s: %v", queue, err)
	}
	return msgs
}

// expect claims from queue with opts and fails unless it got exactly the
// messages want, in that order.
func (k *kit) expect(queue string, opts mqlite.ReceiveOptions, want ...int64) []mqlite.Message {
	k.t.Helper()
	msgs := k.receive(queue, opts)
	if got := seqs(msgs); !slices.Equal(got, want) {
		k.t.Fatalf("receive from %s: got seqs %v, want %v", queue, got, want)
	}
	return msgs
}

// one claims one message of queue and fails unless it is seq.
func (k *kit) one(queue string, seq int64) mqlite.Message {
	k.t.Helper()
	return k.expect(queue, mqlite.ReceiveOptions{}, seq)[0]
}

// none fails if queue hands anything out.
func (k *kit) none(queue string) {
	k.t.Helper()
	k.expect(queue, mqlite.ReceiveOptions{Max: 100})
}

// advance moves the fake clock.
func (k *kit) advance(d time.Duration) { k.clock.Advance(d) }

// must fails on err.
func (k *kit) must(err error, what string) {
	k.t.Helper()
	if err != nil {
		k.t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails unless err matches target.
func (k *kit) wantErr(err, target error, what string) {
	k.t.Helper()
	if !errors.Is(err, target) {
		k.t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

// deadLetters returns the dead letters of queue.
func (k *kit) deadLetters(queue string) []mqlite.Message {
	k.t.Helper()
	msgs, err := k.st.PeekDeadLetters(k.ctx, queue, mqlite.PeekParams{Max: 1000})
	k.must(err, "peek dead letters")
	return msgs
}

// peek returns the messages of queue that are not dead letters.
func (k *kit) peek(queue string) []mqlite.Message {
	k.t.Helper()
	msgs, err := k.st.Peek(k.ctx, queue, mqlite.PeekParams{Max: 1000})
	k.must(err, "peek")
	return msgs
}

// stats returns the counts of queue.
func (k *kit) stats(queue string) mqlite.QueueStats {
	k.t.Helper()
	s, err := k.st.Stats(k.ctx, queue)
	k.must(err, "stats")
	return s
}

// restart simulates a crash and returns after the implementation is open
// again.
func (k *kit) restart() {
	k.t.Helper()
	k.st = k.in.Restart(k.t)
}

func seqs(msgs []mqlite.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

// settleOp is one settlement, for the subtests that run each in turn.
type settleOp struct {
	name string
	do   func(k *kit, l mqlite.Lock) error
}

// settleOps are the four settlements, each with fixed arguments.
var settleOps = []settleOp{
	{"Complete", func(k *kit, l mqlite.Lock) error { return k.st.Complete(k.ctx, l) }},
	{"Abandon", func(k *kit, l mqlite.Lock) error { return k.st.Abandon(k.ctx, l, time.Second) }},
	{"Reject", func(k *kit, l mqlite.Lock) error { return k.st.Reject(k.ctx, l, "bad", "the body was bad") }},
	{"Defer", func(k *kit, l mqlite.Lock) error { return k.st.Defer(k.ctx, l) }},
}

// fenceOps are the settlements, Renew and (when the store has it)
// CompleteBatch: everything a stale delivery must be refused.
func fenceOps() []settleOp {
	ops := append([]settleOp(nil), settleOps...)
	ops = append(ops,
		settleOp{"Renew", func(k *kit, l mqlite.Lock) error { _, err := k.st.Renew(k.ctx, l); return err }},
		settleOp{"RenewBatch", func(k *kit, l mqlite.Lock) error {
			res, err := k.st.RenewBatch(k.ctx, []mqlite.Lock{l})
			if err != nil {
				return err
			}
			return res[0].Err
		}},
		settleOp{"CompleteBatch", func(k *kit, l mqlite.Lock) error {
			res, err := k.st.CompleteBatch(k.ctx, []mqlite.Lock{l})
			if err != nil {
				return err
			}
			return res[0]
		}},
	)
	return ops
}
