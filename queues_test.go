package mqlite_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// defaults is what a zero QueueOptions resolves to.
var defaults = mqlite.QueueOptions{
	MaxDeliveryCount: mqlite.DefaultMaxDeliveryCount,
	LockDuration:     mqlite.DefaultLockDuration,
	DedupWindow:      mqlite.DefaultDedupWindow,
	Ordering:         mqlite.Standard,
	DLQ: mqlite.DLQRetention{
		MaxAge:   mqlite.DefaultDLQMaxAge,
		MaxCount: mqlite.DefaultDLQMaxCount,
		MaxBytes: mqlite.DefaultDLQMaxBytes,
	},
}

// sendCommitted commits one message on queue.
func sendCommitted(t *testing.T, st *mqlite.Store, queue string, msg outbox.Message) int64 {
	t.Helper()
	var seq int64
	err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		var err error
		seq, err = outbox.SendOne(tx.Context(), tx.SQL(), queue, msg)
		return err
	})
	if err != nil {
		t.Fatalf("send on %s: %v", queue, err)
	}
	return seq
}

func getQueue(t *testing.T, st *mqlite.Store, name string) mqlite.QueueInfo {
	t.Helper()
	qi, err := st.GetQueue(context.Background(), name)
	if err != nil {
		t.Fatalf("GetQueue(%s): %v", name, err)
	}
	return qi
}

func queueNames(t *testing.T, st *mqlite.Store) []string {
	t.Helper()
	qs, err := st.ListQueues(context.Background())
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	return names
}

func TestQueueCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	st := b.Store

	b.Queue(t, "orders", mqlite.QueueOptions{})
	b.Queue(t, "events", mqlite.QueueOptions{Ordering: mqlite.FIFO})
	if got := strings.Join(queueNames(t, st), ","); got != "events,orders" {
		t.Fatalf("ListQueues = %s, want events,orders", got)
	}

	orders := getQueue(t, st, "orders")
	if orders.Name != "orders" || orders.Options != defaults {
		t.Fatalf("GetQueue(orders) = %+v, want the defaults %+v", orders, defaults)
	}
	if !orders.CreatedAt.Equal(testdb.Start) || !orders.UpdatedAt.Equal(testdb.Start) {
		t.Fatalf("created %v updated %v, want both %v", orders.CreatedAt, orders.UpdatedAt, testdb.Start)
	}

	b.Clock.Advance(time.Minute)
	updated := mqlite.QueueOptions{MaxDeliveryCount: 3, LockDuration: time.Second, DedupWindow: -1}
	if err := st.UpdateQueue(ctx, "orders", updated); err != nil {
		t.Fatalf("UpdateQueue: %v", err)
	}
	orders = getQueue(t, st, "orders")
	want := defaults
	want.MaxDeliveryCount, want.LockDuration, want.DedupWindow = 3, time.Second, -1
	if orders.Options != want {
		t.Fatalf("after UpdateQueue: %+v, want %+v", orders.Options, want)
	}
	if !orders.CreatedAt.Equal(testdb.Start) || !orders.UpdatedAt.Equal(testdb.Start.Add(time.Minute)) {
		t.Fatalf("after UpdateQueue: created %v updated %v", orders.CreatedAt, orders.UpdatedAt)
	}

	// Deleting a queue removes its messages and dedup rows, not another's.
	sendCommitted(t, st, "events", outbox.Message{Body: []byte("e")})
	sendCommitted(t, st, "orders", outbox.Message{Body: []byte("o"), MessageID: "o1"})
	if err := st.DeleteQueue(ctx, "events"); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if _, err := st.GetQueue(ctx, "events"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("GetQueue after DeleteQueue: %v, want ErrQueueNotFound", err)
	}
	if got := strings.Join(queueNames(t, st), ","); got != "orders" {
		t.Fatalf("ListQueues after delete = %s, want orders", got)
	}
	db := st.DB()
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE queue = 'events'`); n != 0 {
		t.Errorf("%d messages of the deleted queue remain", n)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_dedup WHERE queue = 'events'`); n != 0 {
		t.Errorf("%d dedup rows of the deleted queue remain", n)
	}
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE queue = 'orders'`); n != 1 {
		t.Errorf("orders holds %d messages, want 1", n)
	}
}

func TestQueueOptionsResolve(t *testing.T) {
	t.Parallel()
	custom := mqlite.QueueOptions{
		MaxDeliveryCount:   mqlite.MaxDeliveryLimit,
		LockDuration:       mqlite.MinLockDuration,
		DedupWindow:        mqlite.MaxDedupWindow,
		Ordering:           mqlite.FIFO,
		DefaultTTL:         time.Hour,
		DeadLetterOnExpire: true,
		DLQ:                mqlite.DLQRetention{MaxAge: time.Hour, MaxCount: 5, MaxBytes: 1 << 10},
	}
	unbounded := defaults
	unbounded.DLQ = mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1}
	noDedup := defaults
	noDedup.DedupWindow = -1
	tests := []struct {
		name string
		in   mqlite.QueueOptions
		want mqlite.QueueOptions
	}{
		{"zero means defaults", mqlite.QueueOptions{}, defaults},
		{"every field set", custom, custom},
		{"DedupWindow -1 is off", mqlite.QueueOptions{DedupWindow: -1}, noDedup},
		{"DefaultTTL -1 is none", mqlite.QueueOptions{DefaultTTL: -1}, defaults},
		{"DLQ bounds -1 are unbounded", mqlite.QueueOptions{DLQ: mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1}}, unbounded},
		{"longest lock", mqlite.QueueOptions{LockDuration: mqlite.MaxLockDuration}, func() mqlite.QueueOptions {
			o := defaults
			o.LockDuration = mqlite.MaxLockDuration
			return o
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Config{})
			b.Queue(t, "q", tc.in)
			if got := getQueue(t, b.Store, "q").Options; got != tc.want {
				t.Fatalf("resolved %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestQueueValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		queue string
		opts  mqlite.QueueOptions
		want  error
	}{
		{"empty name", "", mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"space in name", "a b", mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"slash in name", "a/b", mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"name starts with a dash", "-a", mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"non-ASCII name", "café", mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"name too long", strings.Repeat("a", mqlite.MaxQueueNameLen+1), mqlite.QueueOptions{}, mqlite.ErrInvalidQueueName},
		{"negative MaxDeliveryCount", "q", mqlite.QueueOptions{MaxDeliveryCount: -1}, mqlite.ErrInvalidMaxDelivery},
		{"MaxDeliveryCount too large", "q", mqlite.QueueOptions{MaxDeliveryCount: mqlite.MaxDeliveryLimit + 1}, mqlite.ErrInvalidMaxDelivery},
		{"negative LockDuration", "q", mqlite.QueueOptions{LockDuration: -time.Second}, mqlite.ErrInvalidLockDuration},
		{"LockDuration too small", "q", mqlite.QueueOptions{LockDuration: mqlite.MinLockDuration - time.Millisecond}, mqlite.ErrInvalidLockDuration},
		{"LockDuration too large", "q", mqlite.QueueOptions{LockDuration: mqlite.MaxLockDuration + time.Second}, mqlite.ErrInvalidLockDuration},
		{"DedupWindow -2", "q", mqlite.QueueOptions{DedupWindow: -2}, mqlite.ErrInvalidDedupWindow},
		{"negative DedupWindow", "q", mqlite.QueueOptions{DedupWindow: -time.Minute}, mqlite.ErrInvalidDedupWindow},
		{"DedupWindow under 1ms", "q", mqlite.QueueOptions{DedupWindow: time.Microsecond}, mqlite.ErrInvalidDedupWindow},
		{"DedupWindow too large", "q", mqlite.QueueOptions{DedupWindow: mqlite.MaxDedupWindow + time.Second}, mqlite.ErrInvalidDedupWindow},
		{"negative DefaultTTL", "q", mqlite.QueueOptions{DefaultTTL: -time.Second}, mqlite.ErrInvalidTTL},
		{"DefaultTTL too large", "q", mqlite.QueueOptions{DefaultTTL: mqlite.MaxTTL + time.Hour}, mqlite.ErrInvalidTTL},
		{"unknown Ordering", "q", mqlite.QueueOptions{Ordering: 7}, mqlite.ErrInvalidOrdering},
		{"negative Ordering", "q", mqlite.QueueOptions{Ordering: -1}, mqlite.ErrInvalidOrdering},
		{"negative DLQ.MaxAge", "q", mqlite.QueueOptions{DLQ: mqlite.DLQRetention{MaxAge: -time.Hour}}, mqlite.ErrInvalidRetention},
		{"negative DLQ.MaxCount", "q", mqlite.QueueOptions{DLQ: mqlite.DLQRetention{MaxCount: -2}}, mqlite.ErrInvalidRetention},
		{"negative DLQ.MaxBytes", "q", mqlite.QueueOptions{DLQ: mqlite.DLQRetention{MaxBytes: -2}}, mqlite.ErrInvalidRetention},
	}
	check := func(t *testing.T, op string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", op, err, want)
		}
		if !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Fatalf("%s: %v does not match ErrInvalidArgument", op, err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := testdb.Open(t, mqlite.Config{})
			st := b.Store

			check(t, "CreateQueue", st.CreateQueue(ctx, tc.queue, tc.opts), tc.want)
			if names := queueNames(t, st); len(names) != 0 {
				t.Fatalf("a refused CreateQueue wrote queues %v", names)
			}

			// UpdateQueue refuses the same input and leaves the queue as it was.
			b.Queue(t, "q", mqlite.QueueOptions{})
			check(t, "UpdateQueue", st.UpdateQueue(ctx, tc.queue, tc.opts), tc.want)
			if got := getQueue(t, st, "q"); got.Options != defaults || !got.UpdatedAt.Equal(testdb.Start) {
				t.Fatalf("a refused UpdateQueue changed the queue: %+v", got)
			}
		})
	}
}

func TestQueueNameValidationOnLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Open(t, mqlite.Config{}).Store
	if _, err := st.GetQueue(ctx, "a b"); !errors.Is(err, mqlite.ErrInvalidQueueName) {
		t.Errorf("GetQueue: %v, want ErrInvalidQueueName", err)
	}
	if err := st.DeleteQueue(ctx, ""); !errors.Is(err, mqlite.ErrInvalidQueueName) {
		t.Errorf("DeleteQueue: %v, want ErrInvalidQueueName", err)
	}
}

func TestQueueExists(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	err := b.Store.CreateQueue(context.Background(), "q", mqlite.QueueOptions{MaxDeliveryCount: 2})
	if !errors.Is(err, mqlite.ErrQueueExists) {
		t.Fatalf("second CreateQueue: %v, want ErrQueueExists", err)
	}
	if got := getQueue(t, b.Store, "q").Options; got != defaults {
		t.Fatalf("the refused CreateQueue changed the queue: %+v", got)
	}
}

func TestQueueNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testdb.Open(t, mqlite.Config{}).Store
	calls := map[string]func() error{
		"GetQueue":    func() error { _, err := st.GetQueue(ctx, "missing"); return err },
		"DeleteQueue": func() error { return st.DeleteQueue(ctx, "missing") },
		"UpdateQueue": func() error { return st.UpdateQueue(ctx, "missing", mqlite.QueueOptions{}) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, mqlite.ErrQueueNotFound) {
			t.Errorf("%s: %v, want ErrQueueNotFound", name, err)
		}
	}
	if names := queueNames(t, st); len(names) != 0 {
		t.Fatalf("queues %v appeared", names)
	}
}

func TestUpdateQueueOrdering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	st := b.Store
	b.Queue(t, "q", mqlite.QueueOptions{})

	// An empty queue may change its ordering.
	if err := st.UpdateQueue(ctx, "q", mqlite.QueueOptions{Ordering: mqlite.FIFO}); err != nil {
		t.Fatalf("FIFO on an empty queue: %v", err)
	}
	sendCommitted(t, st, "q", outbox.Message{Body: []byte("m")})

	err := st.UpdateQueue(ctx, "q", mqlite.QueueOptions{Ordering: mqlite.Standard})
	if !errors.Is(err, mqlite.ErrInvalidOrdering) || !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("ordering change on a non-empty queue: %v, want ErrInvalidOrdering", err)
	}
	if got := getQueue(t, st, "q").Options.Ordering; got != mqlite.FIFO {
		t.Fatalf("ordering = %v after a refused change, want fifo", got)
	}
	// Other settings of a non-empty queue still change.
	if err := st.UpdateQueue(ctx, "q", mqlite.QueueOptions{Ordering: mqlite.FIFO, MaxDeliveryCount: 4}); err != nil {
		t.Fatalf("UpdateQueue keeping the ordering: %v", err)
	}
	if got := getQueue(t, st, "q").Options.MaxDeliveryCount; got != 4 {
		t.Fatalf("MaxDeliveryCount = %d, want 4", got)
	}
}
