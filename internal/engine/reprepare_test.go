package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// The runs of a hot operation: a few to warm the statement cache up (a
// statement's first run may plan it again with its first values), then the
// measured ones.
const (
	warmRuns     = 3
	measuredRuns = 12
)

// trapSQL has the shape of the trap: a bound parameter compared with the
// column of a partial index's WHERE (mqlite_msg_active's state =
// 'active'). The plan depends on the value (the index is usable only for
// 'active'), so SQLite marks the parameter, expires the statement whenever
// it is bound again, and prepares it again at every run.
const trapSQL = `SELECT count(*) FROM mqlite_messages WHERE queue = ?1 AND state = ?2 AND held = 0`

// literalSQL is trapSQL with the state written in: planned once.
const literalSQL = `SELECT count(*) FROM mqlite_messages WHERE queue = ?1 AND state = 'active' AND held = 0`

// A bound LIMIT is such a trap too on SQLite 3.54: the statement is planned
// with the value and prepared again whenever it runs with another value
// than the run before. The claims of more than one message bind their Max,
// which consumer.Loop and the broker change from call to call: measured
// 81 -> 416 cpu-µs for claims of 2 and 3 in turn, 149 -> 430 for 7 and 8,
// 48 -> 286 in receive-and-delete. They write LIMIT ?5 + 0, which SQLite
// does not plan with (the same query plans); the operation "receive with a
// varying Max" holds them to it.

// hotOp is one operation of the store's hot path, run against a queue of
// its own.
type hotOp struct {
	name  string
	queue string
	opts  mqlite.QueueOptions
	run   func(t *testing.T, st *mqlite.Store, q string)
}

// TestHotStatementsNotReprepared fails when a statement that a hot
// operation of the store runs is prepared again by SQLite at its runs
// (sqlite3_stmt_status's SQLITE_STMTSTATUS_REPREPARE), which costs it a
// parse and a plan each time (measured 72-76 µs a run instead of 9). It
// runs every hot operation warmRuns times, then measuredRuns more, walking
// the connection's prepared statements (sqlite3_next_stmt) around each run
// of it: no statement that ran may have been prepared again. The control
// runs a statement shaped like the trap the same way and must be seen
// prepared again at every run.
func TestHotStatementsNotReprepared(t *testing.T) {
	t.Parallel() // the counts are the store's connection's alone
	tb := testdb.Open(t, mqlite.Config{})
	st := tb.Store
	db := st.DB()
	ops := hotOps()
	for i := range ops {
		ops[i].queue = fmt.Sprintf("hot-%02d", i)
		tb.Queue(t, ops[i].queue, ops[i].opts)
	}

	// The control: the trap is seen, the same statement with a literal
	// is not.
	tb.Queue(t, "control", mqlite.QueueOptions{})
	tb.Send(t, "control", outbox.Message{})
	control := func(query string, args ...any) (reprepares, runs int32, perRun time.Duration) {
		t.Helper()
		before := stmtStats(t, db)
		start := time.Now()
		for range measuredRuns {
			var n int
			if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil || n != 1 {
				t.Fatalf("control %q: %d rows, %v", oneLine(query), n, err)
			}
		}
		perRun = time.Since(start) / measuredRuns
		for _, d := range deltas(before, stmtStats(t, db)) {
			if d.sql == query {
				reprepares, runs = d.reprepares, d.runs
			}
		}
		return reprepares, runs, perRun
	}
	control(trapSQL, "control", "active") // prepared, warm
	control(literalSQL, "control")
	trapRe, trapRuns, trapCost := control(trapSQL, "control", "active")
	litRe, litRuns, litCost := control(literalSQL, "control")
	t.Logf("control: the trap %q prepared again %d times in %d runs (%v a run); with the literal, %d times in %d runs (%v a run)",
		oneLine(trapSQL), trapRe, trapRuns, trapCost, litRe, litRuns, litCost)
	if trapRuns != measuredRuns || trapRe < measuredRuns {
		t.Fatalf("control: the trap ran %d times and was prepared again %d times, want %d and at least %d: the counter does not see re-preparations",
			trapRuns, trapRe, measuredRuns, measuredRuns)
	}
	if litRuns != measuredRuns || litRe != 0 {
		t.Fatalf("control: the literal form ran %d times and was prepared again %d times, want %d and 0", litRuns, litRe, measuredRuns)
	}

	type finding struct {
		op, sql          string
		reprepares, runs int32 // runs: as SQLite counts them (SQLITE_STMTSTATUS_RUN)
	}
	var found []finding
	seen := map[string]bool{} // statements seen running in the measured runs
	for _, op := range ops {
		statements := 0
		of := map[string]*finding{}
		var order []string
		for i := range warmRuns + measuredRuns {
			before := stmtStats(t, db)
			op.run(t, st, op.queue)
			ds := deltas(before, stmtStats(t, db))
			if i < warmRuns {
				continue
			}
			statements = max(statements, len(ds))
			for _, d := range ds {
				seen[d.sql] = true
				f := of[d.sql]
				if f == nil {
					f = &finding{op: op.name, sql: d.sql}
					of[d.sql] = f
					order = append(order, d.sql)
				}
				f.reprepares += d.reprepares
				f.runs += d.runs
			}
		}
		if statements == 0 {
			t.Errorf("%s: no statement of the connection was seen running: the walk misses the hot path", op.name)
		}
		for _, q := range order {
			if f := of[q]; f.reprepares > 0 {
				found = append(found, *f)
			}
		}
	}
	t.Logf("%d distinct statements ran in the measured runs of %d operations (the group commit's SAVEPOINT among them: %v)",
		len(seen), len(ops), seen["SAVEPOINT mqlite_step"])
	for _, f := range found {
		t.Errorf("%s: %q was prepared again %d times in %d runs of the operation (SQLite counted %d runs of it)",
			f.op, oneLine(f.sql), f.reprepares, measuredRuns, f.runs)
	}
}

// hotOps lists the operations of the store's hot path. Each leaves its
// queue with no message ready, so that the next run finds its own.
func hotOps() []hotOp {
	ctx := context.Background()
	return []hotOp{
		{name: "send one", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{Body: []byte("one")})
			hotDrain(t, st, q)
		}},
		{name: "send one with a MessageID", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{Body: []byte("one"), MessageID: hotNewID()})
			hotDrain(t, st, q)
		}},
		{name: "send a batch of 100", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, hotBatch(100, false)...)
			hotDrain(t, st, q)
		}},
		{name: "send a batch of 100 with MessageIDs", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, hotBatch(100, true)...)
			hotDrain(t, st, q)
		}},
		{name: "send a batch of 7", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, hotBatch(7, false)...)
			hotDrain(t, st, q)
		}},
		{name: "receive one, complete", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "complete", st.Complete(ctx, m[0].Lock()))
		}},
		{name: "receive with a wait (a message ready), complete", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{Wait: time.Hour}, 1)
			hotCheck(t, "complete", st.Complete(ctx, m[0].Lock()))
		}},
		{name: "receive waiting for a send, complete", run: func(t *testing.T, st *mqlite.Store, q string) {
			m := hotReceiveWaiting(t, st, q)
			hotCheck(t, "complete", st.Complete(ctx, m.Lock()))
		}},
		{name: "receive from groups, complete", run: func(t *testing.T, st *mqlite.Store, q string) {
			g1, g2 := "g1", "g2"
			hotSend(t, st, q, outbox.Message{GroupID: g1}, outbox.Message{GroupID: g1}, outbox.Message{GroupID: g2})
			for range 2 {
				ms := hotReceive(t, st, q, mqlite.ReceiveOptions{Max: 2}, -1)
				for _, m := range ms {
					hotCheck(t, "complete", st.Complete(ctx, m.Lock()))
				}
			}
			hotDrain(t, st, q)
		}},
		{name: "receive FIFO, complete", opts: mqlite.QueueOptions{Ordering: mqlite.FIFO}, run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{}, outbox.Message{GroupID: "g"})
			for range 2 {
				m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
				hotCheck(t, "complete", st.Complete(ctx, m[0].Lock()))
			}
		}},
		{name: "receive with a varying Max (2, then 3; peek-lock, MaxBytes, receive-and-delete)",
			run: func(t *testing.T, st *mqlite.Store, q string) {
				for _, o := range []mqlite.ReceiveOptions{{}, {MaxBytes: 1 << 20}, {Mode: mqlite.ReceiveAndDelete}} {
					hotSend(t, st, q, hotBatch(5, false)...)
					for _, n := range []int{2, 3} {
						o.Max = n
						ms := hotReceive(t, st, q, o, n)
						if o.Mode == mqlite.PeekLock {
							hotCompleteAll(t, st, ms)
						}
					}
				}
			}},
		{name: "receive-and-delete", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			hotReceive(t, st, q, mqlite.ReceiveOptions{Mode: mqlite.ReceiveAndDelete}, 1)
		}},
		{name: "receive with MaxBytes and an AttemptID, complete", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{}, outbox.Message{})
			opts := mqlite.ReceiveOptions{Max: 2, MaxBytes: 1 << 20, AttemptID: hotNewID()}
			ms := hotReceive(t, st, q, opts, 2)
			hotReceive(t, st, q, opts, 2) // the replay
			hotCompleteAll(t, st, ms)
		}},
		{name: "complete replayed", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "complete", st.Complete(ctx, m[0].Lock()))
			hotCheck(t, "complete again", st.Complete(ctx, m[0].Lock()))
		}},
		{name: "CompleteBatch of 1", run: hotCompleteBatchOf(1)},
		{name: "CompleteBatch of 3", run: hotCompleteBatchOf(3)},
		{name: "CompleteBatch of 12 (bulk)", run: hotCompleteBatchOf(12)},
		{name: "CompleteBatch of 100 (bulk)", run: hotCompleteBatchOf(100)},
		{name: "renew, RenewBatch", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{}, outbox.Message{})
			ms := hotReceive(t, st, q, mqlite.ReceiveOptions{Max: 2}, 2)
			_, err := st.Renew(ctx, ms[0].Lock())
			hotCheck(t, "renew", err)
			res, err := st.RenewBatch(ctx, []mqlite.Lock{ms[0].Lock(), ms[1].Lock()})
			hotCheck(t, "renew batch", err)
			for _, r := range res {
				hotCheck(t, "renew batch", r.Err)
			}
			hotCompleteAll(t, st, ms)
		}},
		{name: "abandon", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "abandon", st.Abandon(ctx, m[0].Lock(), 0))
			m = hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "abandon with reason", st.AbandonWithReason(ctx, m[0].Lock(), 0, "failed"))
			hotDrain(t, st, q)
		}},
		{name: "abandon with a delay", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "abandon", st.Abandon(ctx, m[0].Lock(), time.Second))
		}},
		{name: "reject", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "reject", st.Reject(ctx, m[0].Lock(), "bad", "a bad message"))
		}},
		{name: "defer, receive deferred", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "defer", st.Defer(ctx, m[0].Lock()))
			d, err := st.ReceiveDeferred(ctx, q, m[0].Seq)
			hotCheck(t, "receive deferred", err)
			hotCheck(t, "complete", st.Complete(ctx, d.Lock()))
		}},
		{name: "release", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			hotCheck(t, "release", st.Release(ctx, m[0].Lock()))
			hotDrain(t, st, q)
		}},
		{name: "complete and receive", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{}, outbox.Message{})
			m := hotReceive(t, st, q, mqlite.ReceiveOptions{}, 1)
			errs, next, err := st.CompleteAndReceive(ctx, q, []mqlite.Lock{m[0].Lock()}, mqlite.ReceiveOptions{})
			hotCheck(t, "complete and receive", err)
			hotCheck(t, "complete and receive", errors.Join(errs...))
			if len(next) != 1 {
				t.Fatalf("complete and receive: %d messages, want 1", len(next))
			}
			hotCompleteAll(t, st, next)
		}},
		{name: "CompleteTx, RejectTx in Tx; TxAndReceive", run: func(t *testing.T, st *mqlite.Store, q string) {
			hotSend(t, st, q, outbox.Message{}, outbox.Message{}, outbox.Message{})
			ms := hotReceive(t, st, q, mqlite.ReceiveOptions{Max: 2}, 2)
			hotCheck(t, "tx", st.Tx(ctx, func(tx *mqlite.Tx) error {
				if err := consumer.CompleteTx(tx.Context(), tx.SQL(), ms[0].Lock()); err != nil {
					return err
				}
				return consumer.RejectTx(tx.Context(), tx.SQL(), ms[1].Lock(), "bad", "a bad message")
			}))
			next, err := st.TxAndReceive(ctx, q, mqlite.ReceiveOptions{}, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), q, outbox.Message{Body: []byte("next")})
				return err
			})
			hotCheck(t, "tx and receive", err)
			hotCompleteAll(t, st, next)
			hotDrain(t, st, q)
		}},
		{name: "group commit of concurrent senders", run: func(t *testing.T, st *mqlite.Store, q string) {
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Go(func() {
					for range 4 {
						if _, err := outbox.Send(ctx, st, q, outbox.Message{}); err != nil {
							errs[i] = err
							return
						}
					}
				})
			}
			wg.Wait()
			hotCheck(t, "concurrent sends", errors.Join(errs...))
			hotDrain(t, st, q)
		}},
	}
}

// completeBatchOf returns the operation that receives n messages and
// completes them with one CompleteBatch.
func hotCompleteBatchOf(n int) func(t *testing.T, st *mqlite.Store, q string) {
	return func(t *testing.T, st *mqlite.Store, q string) {
		hotSend(t, st, q, hotBatch(n, false)...)
		ms := hotReceive(t, st, q, mqlite.ReceiveOptions{Max: n}, n)
		locks := make([]mqlite.Lock, len(ms))
		for i, m := range ms {
			locks[i] = m.Lock()
		}
		res, err := st.CompleteBatch(context.Background(), locks)
		hotCheck(t, "complete batch", err)
		hotCheck(t, "complete batch", errors.Join(res...))
	}
}

var idCounter struct {
	sync.Mutex
	n int
}

// newID returns a MessageID or AttemptID no other call returned.
func hotNewID() string {
	idCounter.Lock()
	defer idCounter.Unlock()
	idCounter.n++
	return fmt.Sprintf("id-%d", idCounter.n)
}

// batch returns n messages with bodies of their own, with MessageIDs when
// ids is set.
func hotBatch(n int, ids bool) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i].Body = fmt.Appendf(nil, "body-%d", i)
		if ids {
			msgs[i].MessageID = hotNewID()
		}
	}
	return msgs
}

// send sends msgs to q in one transaction of the store.
func hotSend(t *testing.T, st *mqlite.Store, q string, msgs ...outbox.Message) {
	t.Helper()
	res, err := outbox.Send(context.Background(), st, q, msgs...)
	hotCheck(t, "send", err)
	for _, r := range res {
		hotCheck(t, "send", r.Err)
	}
}

// receive receives from q with opts and checks that want messages came
// (any number when want is negative).
func hotReceive(t *testing.T, st *mqlite.Store, q string, opts mqlite.ReceiveOptions, want int) []mqlite.Message {
	t.Helper()
	ms, err := st.Receive(context.Background(), q, opts)
	hotCheck(t, "receive", err)
	if want >= 0 && len(ms) != want {
		t.Fatalf("receive from %s: %d messages, want %d", q, len(ms), want)
	}
	return ms
}

// receiveWaiting runs a Receive with a wait on the empty queue q, sends
// one message once the store counts the receiver as waiting, and returns
// what the Receive got: the message, claimed in the sender's transaction
// (the hand-off) or after the wait woke.
func hotReceiveWaiting(t *testing.T, st *mqlite.Store, q string) mqlite.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		ms  []mqlite.Message
		err error
	}
	got := make(chan result, 1)
	go func() {
		ms, err := st.Receive(ctx, q, mqlite.ReceiveOptions{Wait: time.Hour})
		got <- result{ms, err}
	}()
	for waiting := false; !waiting; {
		rs, err := st.Receivers(ctx)
		hotCheck(t, "receivers", err)
		for _, r := range rs {
			waiting = waiting || r.Queue == q && r.Waiting > 0
		}
		runtime.Gosched()
	}
	hotSend(t, st, q, outbox.Message{})
	r := <-got
	hotCheck(t, "receive waiting", r.err)
	if len(r.ms) != 1 {
		t.Fatalf("receive waiting: %d messages, want 1", len(r.ms))
	}
	return r.ms[0]
}

// drain receives and completes what q holds ready, one message at a time:
// the claim of one binds no Max that changes.
func hotDrain(t *testing.T, st *mqlite.Store, q string) {
	t.Helper()
	for {
		ms := hotReceive(t, st, q, mqlite.ReceiveOptions{}, -1)
		if len(ms) == 0 {
			return
		}
		hotCompleteAll(t, st, ms)
	}
}

// completeAll completes ms one by one.
func hotCompleteAll(t *testing.T, st *mqlite.Store, ms []mqlite.Message) {
	t.Helper()
	for _, m := range ms {
		hotCheck(t, "complete", st.Complete(context.Background(), m.Lock()))
	}
}

// check fails the test when err is not nil.
func hotCheck(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
