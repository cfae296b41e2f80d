package mqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// insideTxCall is one store call made inside a Store.Tx callback.
type insideTxCall struct {
	name string // the Store method, or the function, called
	call func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error
}

// insideTxCalls calls every Store method that uses the connection, plus
// outbox.Send on the store, with valid arguments.
func insideTxCalls(t *testing.T) []insideTxCall {
	q, lk := "q", func(l mqlite.Lock) []mqlite.Lock { return []mqlite.Lock{l} }
	e := func(_ any, err error) error { return err }
	e3 := func(_, _ any, err error) error { return err }
	return []insideTxCall{
		{"Backup", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.Backup(ctx, filepath.Join(t.TempDir(), "copy.db"))
		}},
		{"Find", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.Find(ctx, q, mqlite.FindParams{}))
		}},
		{"Ages", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.Ages(ctx)) }},
		{"Peek", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.Peek(ctx, q, mqlite.PeekParams{}))
		}},
		{"PeekDeadLetters", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.PeekDeadLetters(ctx, q, mqlite.PeekParams{}))
		}},
		{"Redrive", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.Redrive(ctx, q, mqlite.RedriveOptions{}))
		}},
		{"DeliverNow", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.DeliverNow(ctx, q, mqlite.DeliverNowOptions{}))
		}},
		{"Purge", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.Purge(ctx, q, mqlite.PurgeOptions{State: mqlite.StateLocked}))
		}},
		{"Stats", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.Stats(ctx, q)) }},
		{"PauseQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.PauseQueue(ctx, q) }},
		{"ResumeQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.ResumeQueue(ctx, q) }},
		{"CreateQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.CreateQueue(ctx, "other", mqlite.QueueOptions{})
		}},
		{"UpdateQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.UpdateQueue(ctx, q, mqlite.QueueOptions{MaxDeliveryCount: 3})
		}},
		{"DeleteQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.DeleteQueue(ctx, q) }},
		{"GetQueue", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.GetQueue(ctx, q)) }},
		{"ListQueues", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.ListQueues(ctx)) }},
		{"Receive", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.Receive(ctx, q, mqlite.ReceiveOptions{Wait: time.Hour}))
		}},
		{"ReceiveDeferred", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			return e(st.ReceiveDeferred(ctx, q, l.Seq))
		}},
		{"CompleteAndReceive", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			return e3(st.CompleteAndReceive(ctx, q, lk(l), mqlite.ReceiveOptions{}))
		}},
		{"CreateSchedule", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.CreateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: q, Every: time.Minute})
		}},
		{"UpdateSchedule", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.UpdateSchedule(ctx, "s", mqlite.ScheduleOptions{Target: q, Every: time.Minute})
		}},
		{"DeleteSchedule", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.DeleteSchedule(ctx, "s") }},
		{"GetSchedule", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.GetSchedule(ctx, "s")) }},
		{"ListSchedules", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.ListSchedules(ctx, mqlite.ListSchedulesParams{}))
		}},
		{"Complete", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Complete(ctx, l) }},
		{"CompleteBatch", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			return e(st.CompleteBatch(ctx, lk(l)))
		}},
		{"Abandon", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Abandon(ctx, l, 0) }},
		{"Release", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Release(ctx, l) }},
		{"AbandonWithReason", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error {
			return st.AbandonWithReason(ctx, l, 0, "why")
		}},
		{"Reject", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Reject(ctx, l, "r", "d") }},
		{"Defer", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return st.Defer(ctx, l) }},
		{"Renew", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return e(st.Renew(ctx, l)) }},
		{"RenewBatch", func(ctx context.Context, st *mqlite.Store, l mqlite.Lock) error { return e(st.RenewBatch(ctx, lk(l))) }},
		{"CreateTopic", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.CreateTopic(ctx, "t") }},
		{"DeleteTopic", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return st.DeleteTopic(ctx, "t") }},
		{"GetTopic", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.GetTopic(ctx, "t")) }},
		{"ListTopics", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error { return e(st.ListTopics(ctx)) }},
		{"CreateSubscription", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.CreateSubscription(ctx, "t", "sub", mqlite.SubscriptionOptions{})
		}},
		{"UpdateSubscription", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.UpdateSubscription(ctx, "t", "sub", mqlite.Filter{Subject: "x"})
		}},
		{"DeleteSubscription", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.DeleteSubscription(ctx, "t", "sub")
		}},
		{"Tx", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return st.Tx(ctx, func(*mqlite.Tx) error { return nil })
		}},
		{"TxAndReceive", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(st.TxAndReceive(ctx, q, mqlite.ReceiveOptions{}, func(*mqlite.Tx) error { return nil }))
		}},
		{"outbox.Send", func(ctx context.Context, st *mqlite.Store, _ mqlite.Lock) error {
			return e(outbox.Send(ctx, st, q, outbox.Message{Body: []byte("inside")}))
		}},
	}
}

// offConnection are the Store methods that never wait for the connection:
// they answer from memory, or (Close) are documented to return inside a
// transaction.
var offConnection = map[string]bool{
	"Close": true, "DB": true, "Path": true, "Clock": true, "Migration": true,
	"Metrics": true, "Receivers": true, "TracerProvider": true,
}

// TestInsideTxCallsCoverTheStore: insideTxCalls has every method of Store
// that uses the connection, so a new one cannot miss the ErrInsideTx check.
func TestInsideTxCallsCoverTheStore(t *testing.T) {
	t.Parallel()
	have := map[string]bool{}
	for _, c := range insideTxCalls(t) {
		have[c.name] = true
	}
	typ := reflect.TypeFor[*mqlite.Store]()
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; !have[name] && !offConnection[name] {
			t.Errorf("Store.%s is neither in insideTxCalls nor in offConnection", name)
		}
	}
}

// txOpeners open a transaction on a store's connection and run body with
// the context of its callback: Store.Tx, and InTx on Store.DB().
var txOpeners = []struct {
	name string
	run  func(ctx context.Context, st *mqlite.Store, body func(txCtx context.Context) error) error
}{
	{"Tx", func(ctx context.Context, st *mqlite.Store, body func(context.Context) error) error {
		return st.Tx(ctx, func(tx *mqlite.Tx) error { return body(tx.Context()) })
	}},
	{"InTx", func(ctx context.Context, st *mqlite.Store, body func(context.Context) error) error {
		return mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, _ *sql.Tx) error { return body(ctx) })
	}},
}

// TestStoreCallInsideTx: every store call made with the context of a
// Store.Tx (or InTx) callback while it holds the connection fails with
// ErrInsideTx at once, while the callback still holds the connection, and
// writes nothing; after the transaction ended, the same context is no
// longer refused.
func TestStoreCallInsideTx(t *testing.T) {
	eachInsideTxCall(t, func(t *testing.T, tc insideTxCall, st *mqlite.Store, m mqlite.Message) {
		for _, opener := range txOpeners {
			ctx := context.Background()
			before := fileRows(t, st)
			var txCtx context.Context
			// A derived context (a handler's timeout) is refused the same.
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			err := opener.run(ctx, st, func(ctx context.Context) error {
				txCtx = ctx
				callCtx, cancel = context.WithCancel(ctx)
				go func() { done <- tc.call(callCtx, st, m.Lock()) }()
				select {
				case err := <-done:
					return err
				case <-time.After(time.Minute):
					// The call waits for the connection this callback
					// holds: let go of it, so the call can end.
					cancel()
					return errors.New("still waiting for the connection after a minute")
				}
			})
			if err != nil && !errors.Is(err, mqlite.ErrInsideTx) {
				<-done
			}
			if !errors.Is(err, mqlite.ErrInsideTx) {
				t.Fatalf("%s inside %s: %v, want ErrInsideTx", tc.name, opener.name, err)
			}
			if after := fileRows(t, st); after != before {
				t.Fatalf("%s inside %s wrote:\nbefore %s\nafter  %s", tc.name, opener.name, before, after)
			}
			// Cancelled, so that the call checks and then stops at once.
			afterCtx, cancel := context.WithCancel(txCtx)
			cancel()
			if err := tc.call(afterCtx, st, m.Lock()); errors.Is(err, mqlite.ErrInsideTx) {
				t.Fatalf("%s after %s returned: %v", tc.name, opener.name, err)
			}
		}
	})
}

// TestInTxOnAnotherStore: a store call made inside InTx on another store's
// connection is not refused: that transaction does not hold this store's
// connection.
func TestInTxOnAnotherStore(t *testing.T) {
	t.Parallel()
	st, other := testdb.OpenQueue(t, "q", mqlite.QueueOptions{}).Store, testdb.Open(t, mqlite.Config{}).Store
	err := mqlite.InTx(context.Background(), other.DB().BeginTx, func(ctx context.Context, _ *sql.Tx) error {
		_, err := st.GetQueue(ctx, "q")
		return err
	})
	if err != nil {
		t.Fatalf("a call on st inside a transaction of another store: %v", err)
	}
}

// TestStoreCallWaitHonoursDeadline: while another goroutine's transaction
// holds the connection, every store call with a short deadline returns
// context.DeadlineExceeded while the holder still holds it, not once it lets
// go; the holder then commits.
func TestStoreCallWaitHonoursDeadline(t *testing.T) {
	eachInsideTxCall(t, func(t *testing.T, tc insideTxCall, st *mqlite.Store, m mqlite.Message) {
		ctx := context.Background()
		holding, release := make(chan struct{}), make(chan struct{})
		var released atomic.Bool
		held := make(chan error, 1)
		go func() {
			held <- st.Tx(ctx, func(*mqlite.Tx) error {
				close(holding)
				<-release
				released.Store(true)
				return nil
			})
		}()
		<-holding
		callCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		type result struct {
			err  error
			late bool // the holder had let go
		}
		done := make(chan result, 1)
		go func() {
			err := tc.call(callCtx, st, m.Lock())
			done <- result{err, released.Load()}
		}()
		var r result
		select {
		case r = <-done:
			close(release)
		case <-time.After(time.Minute):
			close(release) // the call ignores its deadline
			r = <-done
		}
		if !errors.Is(r.err, context.DeadlineExceeded) || r.late {
			t.Errorf("%s while another transaction holds the connection: %v (after the holder let go: %v), want context.DeadlineExceeded before", tc.name, r.err, r.late)
		}
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
	})
}

// fileRows returns every row of every mqlite_ table of st's file, as text.
func fileRows(t *testing.T, st *mqlite.Store) string {
	t.Helper()
	var b strings.Builder
	for _, table := range testdb.Strings(t, st.DB(), `SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'mqlite\_%' ESCAPE '\' ORDER BY name`) {
		fmt.Fprintf(&b, "%s%q;", table, testdb.Rows(t, st.DB(), table))
	}
	return b.String()
}

// eachInsideTxCall runs test, in parallel, for each of insideTxCalls on a
// store of its own with one locked message (lockedOne).
func eachInsideTxCall(t *testing.T, test func(t *testing.T, tc insideTxCall, st *mqlite.Store, m mqlite.Message)) {
	t.Parallel()
	for _, tc := range insideTxCalls(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, m := lockedOne(t)
			test(t, tc, st, m)
		})
	}
}

// lockedOne opens a store with queue "q" and one message of it received
// (locked for a minute), for a call to settle.
func lockedOne(t *testing.T) (*mqlite.Store, mqlite.Message) {
	t.Helper()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Minute})
	tb.Send(t, "q", outbox.Message{})
	got, err := tb.Store.Receive(context.Background(), "q", mqlite.ReceiveOptions{})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %d", err, len(got))
	}
	return tb.Store, got[0]
}
