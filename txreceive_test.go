package mqlite_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// TestTxAndReceive: fn's work and the claim commit together; the claim is
// Receive's (the oldest message, locked, its delivery counted); a fn that
// fails, a queue that does not exist and bad options commit and claim
// nothing.
func TestTxAndReceive(t *testing.T) {
	b := openQueue(t)
	ctx := context.Background()
	if _, err := b.Store.DB().Exec(`CREATE TABLE effects (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	b.Send(t, "q", outbox.Message{Body: []byte("1")}, outbox.Message{Body: []byte("2")}, outbox.Message{Body: []byte("3")})
	insert := func(tx *mqlite.Tx) error {
		_, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO effects VALUES (1)`)
		return err
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		queue string
		opts  mqlite.ReceiveOptions
		fn    func(*mqlite.Tx) error
		want  error
	}{
		{"fn fails", "q", mqlite.ReceiveOptions{}, func(tx *mqlite.Tx) error { _ = insert(tx); return boom }, boom},
		{"unknown queue", "nope", mqlite.ReceiveOptions{}, insert, mqlite.ErrQueueNotFound},
		{"bad max", "q", mqlite.ReceiveOptions{Max: -1}, insert, mqlite.ErrInvalidArgument},
	} {
		msgs, err := b.Store.TxAndReceive(ctx, tc.queue, tc.opts, tc.fn)
		if !errors.Is(err, tc.want) || len(msgs) != 0 {
			t.Errorf("%s: %d messages, %v; want none, %v", tc.name, len(msgs), err, tc.want)
		}
	}
	if n := countEffects(t, b.Store); n != 0 {
		t.Fatalf("%d effects after the failed calls, want 0", n)
	}

	msgs, err := b.Store.TxAndReceive(ctx, "q", mqlite.ReceiveOptions{Max: 1}, insert)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "1" || msgs[0].DeliveryCount != 1 {
		t.Fatalf("claimed %+v, %v; want message 1 on its first delivery", msgs, err)
	}
	if n := countEffects(t, b.Store); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// The claimed message is locked: Receive gets the next one.
	next, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(next) != 1 || string(next[0].Body) != "2" {
		t.Fatalf("receive after: %+v, %v; want message 2", next, err)
	}
	if err := b.Store.Complete(ctx, msgs[0].Lock()); err != nil {
		t.Fatalf("complete the claimed message: %v", err)
	}
}

func countEffects(t *testing.T, st *mqlite.Store) int {
	t.Helper()
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLoopTxClaimsInItsCommits: LoopTx over the store claims the next
// message in the commit of each step, so its Loop calls Receive only to
// start and once the queue is empty; the control, a TxStore whose
// TxAndReceive claims nothing, calls Receive for nearly every message.
func TestLoopTxClaimsInItsCommits(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name  string
		src   func(*mqlite.Store) consumer.TxStore
		apart bool // the control: claims outside the step's commit
	}{
		{"claims in the commit", func(st *mqlite.Store) consumer.TxStore { return st }, false},
		{"control: claims apart", func(st *mqlite.Store) consumer.TxStore { return claimsApart{st} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := openQueue(t)
			for range n {
				b.Send(t, "q", outbox.Message{})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			obs := &countCompleted{n: n, done: done}
			src := &countReceives{TxStore: tc.src(b.Store)}
			loopErr := make(chan error, 1)
			go func() {
				loopErr <- consumer.LoopTx(ctx, src, "q", func(context.Context, mqlite.Message) (consumer.TxStep, error) {
					return nil, nil
				}, consumer.LoopConfig{Concurrency: 1, Observer: obs})
			}()
			<-done
			receives := src.n.Load()
			cancel()
			if err := <-loopErr; err != nil {
				t.Fatal(err)
			}
			t.Logf("%d Receives for %d messages", receives, n)
			if apart := receives > 4; apart != tc.apart {
				t.Fatalf("%d Receives for %d messages; claims apart: %v, want %v", receives, n, apart, tc.apart)
			}
		})
	}
}

// claimsApart is the store as a TxStore whose TxAndReceive claims nothing.
type claimsApart struct{ *mqlite.Store }

func (s claimsApart) TxAndReceive(ctx context.Context, _ string, _ mqlite.ReceiveOptions, fn func(*mqlite.Tx) error) ([]mqlite.Message, error) {
	return nil, s.Tx(ctx, fn)
}

// countReceives counts the Receives of a TxStore.
type countReceives struct {
	consumer.TxStore
	n atomic.Int64
}

func (s *countReceives) Receive(ctx context.Context, q string, o mqlite.ReceiveOptions) ([]mqlite.Message, error) {
	s.n.Add(1)
	return s.TxStore.Receive(ctx, q, o)
}

// countCompleted closes done at the n-th completion.
type countCompleted struct {
	consumer.NopObserver
	n     int64
	count atomic.Int64
	done  chan struct{}
}

func (c *countCompleted) Completed(mqlite.Message, time.Duration) {
	if c.count.Add(1) == c.n {
		close(c.done)
	}
}
