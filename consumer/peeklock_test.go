package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

const lease = 30 * time.Second

type bundle struct {
	*testdb.Bundle
	src consumer.Source
}

func setup(t *testing.T, opts mqlite.QueueOptions) *bundle {
	t.Helper()
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	if opts.LockDuration == 0 {
		opts.LockDuration = lease
	}
	b.Queue(t, "q", opts)
	return &bundle{Bundle: b, src: b.Store}
}

func (b *bundle) send(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	var seqs []int64
	err := b.Store.Tx(context.Background(), func(tx *mqlite.Tx) error {
		for _, m := range msgs {
			if m.Body == nil {
				m.Body = []byte(fmt.Sprintf("body-%d-%s", len(seqs), m.MessageID))
			}
			seq, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", m)
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return seqs
}

func (b *bundle) receive(t *testing.T, opts mqlite.ReceiveOptions) []mqlite.Message {
	t.Helper()
	msgs, err := b.src.Receive(context.Background(), "q", opts)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return msgs
}

// receiveOne receives and returns the one message expected, or fails.
func (b *bundle) receiveOne(t *testing.T, want int64) mqlite.Message {
	t.Helper()
	msgs := b.receive(t, mqlite.ReceiveOptions{})
	if len(msgs) != 1 || msgs[0].Seq != want {
		t.Fatalf("receive: got %v, want seq %d", seqsOf(msgs), want)
	}
	return msgs[0]
}

func (b *bundle) receiveNone(t *testing.T) {
	t.Helper()
	if msgs := b.receive(t, mqlite.ReceiveOptions{Max: 10}); len(msgs) != 0 {
		t.Fatalf("receive: got %v, want nothing", seqsOf(msgs))
	}
}

func seqsOf(msgs []mqlite.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

func wantLockLost(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("got %v, want mqlite.ErrLockLost", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var ctx = context.Background()

func TestClaimSetsLeaseTokenAndCount(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seqs := b.send(t, outbox.Message{Body: []byte("x"), Subject: "s", Properties: map[string]string{"k": "v"}})
	m := b.receiveOne(t, seqs[0])
	if len(m.LockToken) != 32 {
		t.Errorf("token %q, want 32 hex digits (128 bits)", m.LockToken)
	}
	if want := b.Clock.Now().Add(lease); !m.LockedUntil.Equal(want) {
		t.Errorf("LockedUntil %v, want %v", m.LockedUntil, want)
	}
	if m.DeliveryCount != 1 || string(m.Body) != "x" || m.Subject != "s" || m.Properties["k"] != "v" {
		t.Errorf("message %+v", m)
	}
	must(t, b.src.Abandon(ctx, m.Lock(), 0))
	m2 := b.receiveOne(t, seqs[0])
	if m2.DeliveryCount != 2 || m2.LockToken == m.LockToken {
		t.Errorf("second delivery: count %d token %q (first %q)", m2.DeliveryCount, m2.LockToken, m.LockToken)
	}
}

func TestStaleTokenIsLockLost(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seq := b.send(t, outbox.Message{})[0]
	first := b.receiveOne(t, seq)
	must(t, b.src.Abandon(ctx, first.Lock(), 0))
	second := b.receiveOne(t, seq)
	for name, op := range map[string]func(mqlite.Lock) error{
		"complete": func(l mqlite.Lock) error { return b.src.Complete(ctx, l) },
		"abandon":  func(l mqlite.Lock) error { return b.src.Abandon(ctx, l, time.Second) },
		"reject":   func(l mqlite.Lock) error { return b.src.Reject(ctx, l, "r", "d") },
		"defer":    func(l mqlite.Lock) error { return b.src.Defer(ctx, l) },
		"renew":    func(l mqlite.Lock) error { _, err := b.src.Renew(ctx, l); return err },
	} {
		t.Run(name, func(t *testing.T) { wantLockLost(t, op(first.Lock())) })
	}
	wrong := second.Lock()
	wrong.Token = first.LockToken[:31] + "0"
	wantLockLost(t, b.src.Complete(ctx, wrong))
	must(t, b.src.Complete(ctx, second.Lock()))
}

func TestExpiredLeaseAtExactDeadlineIsLockLost(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seq := b.send(t, outbox.Message{}, outbox.Message{})[0]
	m := b.receiveOne(t, seq)
	b.Clock.Advance(lease - time.Millisecond)
	until, err := b.src.Renew(ctx, m.Lock())
	must(t, err)
	if want := b.Clock.Now().Add(lease); !until.Equal(want) {
		t.Fatalf("renewed to %v, want %v", until, want)
	}
	b.Clock.Set(until) // exactly the deadline: already expired, before any sweep
	wantLockLost(t, b.src.Complete(ctx, m.Lock()))
	_, err = b.src.Renew(ctx, m.Lock())
	wantLockLost(t, err) // never revives an expired lease
	res, err := b.src.RenewBatch(ctx, []mqlite.Lock{m.Lock()})
	must(t, err)
	wantLockLost(t, res[0].Err)
}

func TestSettlementReplay(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seqs := b.send(t, outbox.Message{}, outbox.Message{}, outbox.Message{}, outbox.Message{})

	t.Run("complete replays", func(t *testing.T) {
		m := b.receiveOne(t, seqs[0])
		must(t, b.src.Complete(ctx, m.Lock()))
		must(t, b.src.Complete(ctx, m.Lock()))
		wantLockLost(t, b.src.Defer(ctx, m.Lock()))      // another operation
		wantLockLost(t, b.src.Abandon(ctx, m.Lock(), 0)) // another operation
		other := m.Lock()
		other.Token = "00000000000000000000000000000000"
		wantLockLost(t, b.src.Complete(ctx, other)) // another token
	})
	t.Run("abandon replays only with the same delay", func(t *testing.T) {
		m := b.receiveOne(t, seqs[1])
		must(t, b.src.Abandon(ctx, m.Lock(), 5*time.Second))
		must(t, b.src.Abandon(ctx, m.Lock(), 5*time.Second))
		wantLockLost(t, b.src.Abandon(ctx, m.Lock(), 6*time.Second))
		wantLockLost(t, b.src.Complete(ctx, m.Lock()))
	})
	t.Run("reject replays only with the same reason and description", func(t *testing.T) {
		m := b.receiveOne(t, seqs[2])
		must(t, b.src.Reject(ctx, m.Lock(), "bad", "very bad"))
		must(t, b.src.Reject(ctx, m.Lock(), "bad", "very bad"))
		wantLockLost(t, b.src.Reject(ctx, m.Lock(), "bad", "other"))
		wantLockLost(t, b.src.Reject(ctx, m.Lock(), "other", "very bad"))
	})
	t.Run("receipt replays after the lease ends, until it expires", func(t *testing.T) {
		m := b.receiveOne(t, seqs[3])
		must(t, b.src.Defer(ctx, m.Lock()))
		b.Clock.Advance(lease + time.Minute)
		must(t, b.src.Defer(ctx, m.Lock()))
		b.Clock.Advance(30 * time.Minute)
		wantLockLost(t, b.src.Defer(ctx, m.Lock()))
	})
}

func TestReceiveAttemptReplay(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	b.send(t, outbox.Message{}, outbox.Message{}, outbox.Message{}, outbox.Message{})
	first := b.receive(t, mqlite.ReceiveOptions{Max: 3, AttemptID: "a1"})
	again := b.receive(t, mqlite.ReceiveOptions{Max: 3, AttemptID: "a1"})
	if len(first) != 3 || len(again) != 3 {
		t.Fatalf("got %d then %d messages, want 3 and 3", len(first), len(again))
	}
	for i := range first {
		if first[i].Seq != again[i].Seq || first[i].LockToken != again[i].LockToken ||
			!first[i].LockedUntil.Equal(again[i].LockedUntil) || string(first[i].Body) != string(again[i].Body) {
			t.Errorf("replay %d: %+v, first %+v", i, again[i], first[i])
		}
	}
	peek, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	for _, m := range peek {
		if m.DeliveryCount > 1 {
			t.Errorf("seq %d delivered %d times: the replay burned a delivery", m.Seq, m.DeliveryCount)
		}
	}
	// A new attempt id claims what is left; the replayed tokens still settle.
	if rest := b.receive(t, mqlite.ReceiveOptions{Max: 3, AttemptID: "a2"}); len(rest) != 1 {
		t.Fatalf("new attempt got %d messages, want 1", len(rest))
	}
	must(t, b.src.Complete(ctx, again[0].Lock()))
}

func TestReceiveAndDelete(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seqs := b.send(t, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b")})
	msgs := b.receive(t, mqlite.ReceiveOptions{Max: 5, Mode: mqlite.ReceiveAndDelete})
	if len(msgs) != 2 || msgs[0].Seq != seqs[0] || string(msgs[1].Body) != "b" {
		t.Fatalf("got %+v", msgs)
	}
	for _, m := range msgs {
		if m.LockToken != "" || !m.LockedUntil.IsZero() || m.DeliveryCount != 1 {
			t.Errorf("seq %d: token %q until %v count %d, want no lease", m.Seq, m.LockToken, m.LockedUntil, m.DeliveryCount)
		}
	}
	peek, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(peek) != 0 {
		t.Fatalf("rows left: %v", seqsOf(peek))
	}
}

func TestGroupOrderAcrossAbandonAndLeaseExpiry(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seqs := b.send(t,
		outbox.Message{GroupID: "g"}, outbox.Message{GroupID: "g"}, outbox.Message{GroupID: "g"},
		outbox.Message{}, outbox.Message{GroupID: "h"})
	g1 := b.receiveOne(t, seqs[0])
	// g's head is locked: the next claims skip g but hand out the others.
	free := b.receive(t, mqlite.ReceiveOptions{Max: 10})
	if got := seqsOf(free); len(got) != 2 || got[0] != seqs[3] || got[1] != seqs[4] {
		t.Fatalf("with g locked got %v, want [%d %d]", got, seqs[3], seqs[4])
	}
	b.receiveNone(t)
	// Abandon: the head comes back first.
	must(t, b.src.Abandon(ctx, g1.Lock(), 0))
	b.receiveOne(t, seqs[0])
	// Lease expiry: the head is still first, never overtaken.
	b.Clock.Advance(lease)
	g1b := b.receive(t, mqlite.ReceiveOptions{Max: 10})
	if got := seqsOf(g1b); len(got) != 3 || got[0] != seqs[0] {
		t.Fatalf("after expiry got %v, want the head %d first (and the lapsed others)", got, seqs[0])
	}
	// Complete the head: the second of the group is released.
	for _, m := range g1b {
		must(t, b.src.Complete(ctx, m.Lock()))
	}
	g2 := b.receiveOne(t, seqs[1])
	must(t, b.src.Abandon(ctx, g2.Lock(), 10*time.Second)) // scheduled: still blocks g
	b.receiveNone(t)
	b.Clock.Advance(10 * time.Second)
	g2 = b.receiveOne(t, seqs[1])
	must(t, b.src.Defer(ctx, g2.Lock())) // deferred: still blocks g
	b.receiveNone(t)
	d, err := b.src.ReceiveDeferred(ctx, "q", seqs[1])
	must(t, err)
	must(t, b.src.Reject(ctx, d.Lock(), "poison", "")) // dead-lettered: releases g
	b.receiveOne(t, seqs[2])
}

func TestFIFOQueueIsOneGroup(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{Ordering: mqlite.FIFO})
	seqs := b.send(t, outbox.Message{}, outbox.Message{}, outbox.Message{})
	for _, seq := range seqs {
		m := b.receiveOne(t, seq)
		b.receiveNone(t)
		must(t, b.src.Complete(ctx, m.Lock()))
	}
	b.receiveNone(t)
}

func TestScheduledAndTTL(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	now := b.Clock.Now()
	seqs := b.send(t,
		outbox.Message{DeliverAt: now.Add(time.Minute)},
		outbox.Message{TTL: time.Second},
	)
	b.Clock.Advance(time.Second) // the TTL'd message is past its deadline
	b.receiveNone(t)
	b.Clock.Advance(time.Minute - time.Second - time.Millisecond)
	b.receiveNone(t) // one millisecond before DeliverAt
	b.Clock.Advance(time.Millisecond)
	b.receiveOne(t, seqs[0])
}

func TestDeliveryLimitDeadLetters(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{MaxDeliveryCount: 2})
	seqs := b.send(t, outbox.Message{}, outbox.Message{})

	m := b.receiveOne(t, seqs[0])
	must(t, b.src.Abandon(ctx, m.Lock(), 0))
	m = b.receiveOne(t, seqs[0])
	must(t, b.src.Abandon(ctx, m.Lock(), 0)) // the last allowed delivery: dead-lettered

	m = b.receiveOne(t, seqs[1])
	must(t, b.src.Abandon(ctx, m.Lock(), 0))
	b.receiveOne(t, seqs[1])
	b.Clock.Advance(lease) // the last allowed delivery's lease lapses
	b.receiveNone(t)

	dead, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(dead) != 2 {
		t.Fatalf("dead letters %v, want both", seqsOf(dead))
	}
	for _, d := range dead {
		if d.DeliveryCount != 2 || d.DeadLetterReason != "max delivery count exceeded" || d.DeadLetteredAt.IsZero() {
			t.Errorf("dead letter %+v", d)
		}
	}
}

func TestRejectKeepsReasonAndDescription(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seq := b.send(t, outbox.Message{})[0]
	m := b.receiveOne(t, seq)
	must(t, b.src.Reject(ctx, m.Lock(), "schema", "field x missing"))
	dead, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(dead) != 1 || dead[0].DeadLetterReason != "schema" || dead[0].DeadLetterDescription != "field x missing" ||
		!dead[0].DeadLetteredAt.Equal(b.Clock.Now()) || dead[0].State != "dead_lettered" {
		t.Fatalf("dead letters %+v", dead)
	}
}

func TestDeferOnlyReceiveDeferredClaims(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	seq := b.send(t, outbox.Message{})[0]
	m := b.receiveOne(t, seq)
	must(t, b.src.Defer(ctx, m.Lock()))
	b.receiveNone(t)
	if _, err := b.src.ReceiveDeferred(ctx, "q", seq+100); !errors.Is(err, mqlite.ErrMessageNotFound) {
		t.Fatalf("unknown seq: %v", err)
	}
	d, err := b.src.ReceiveDeferred(ctx, "q", seq)
	must(t, err)
	if d.DeliveryCount != 2 || d.LockToken == "" || d.LockToken == m.LockToken {
		t.Fatalf("deferred delivery %+v", d)
	}
	if _, err := b.src.ReceiveDeferred(ctx, "q", seq); !errors.Is(err, mqlite.ErrMessageNotFound) {
		t.Fatalf("second ReceiveDeferred: %v, want ErrMessageNotFound (it is locked)", err)
	}
	must(t, b.src.Complete(ctx, d.Lock()))
}

func TestReceiveBadInput(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	for _, tc := range []struct {
		name  string
		queue string
		opts  mqlite.ReceiveOptions
		want  error
	}{
		{"empty queue", "", mqlite.ReceiveOptions{}, mqlite.ErrInvalidQueueName},
		{"unknown queue", "nope", mqlite.ReceiveOptions{}, mqlite.ErrQueueNotFound},
		{"negative max", "q", mqlite.ReceiveOptions{Max: -1}, mqlite.ErrInvalidArgument},
		{"huge max", "q", mqlite.ReceiveOptions{Max: 1001}, mqlite.ErrInvalidArgument},
		{"negative wait", "q", mqlite.ReceiveOptions{Wait: -1}, mqlite.ErrInvalidArgument},
		{"bad mode", "q", mqlite.ReceiveOptions{Mode: 7}, mqlite.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.src.Receive(ctx, tc.queue, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	for _, l := range []mqlite.Lock{{Queue: "q", Seq: 0, Token: "t"}, {Queue: "q", Seq: 1}, {Seq: 1, Token: "t"}} {
		if err := b.src.Complete(ctx, l); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("Complete(%+v): %v, want mqlite.ErrInvalidArgument", l, err)
		}
	}
	if err := b.src.Abandon(ctx, mqlite.Lock{Queue: "q", Seq: 1, Token: "t"}, -time.Second); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("negative delay: %v", err)
	}
}

func TestWaitWakesOnCommitNotOnRollback(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	got := make(chan []mqlite.Message, 1)
	go func() {
		msgs, err := b.src.Receive(ctx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	rolledBack := errors.New("roll back")
	err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("never")}); err != nil {
			return err
		}
		return rolledBack
	})
	if !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	seq := b.send(t, outbox.Message{Body: []byte("yes")})[0]
	select {
	case msgs := <-got:
		if len(msgs) != 1 || msgs[0].Seq != seq {
			t.Fatalf("woke with %v, want [%d]", seqsOf(msgs), seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a committed send did not wake the waiting Receive")
	}
}

func TestWaitEndsOnCloseAndCancel(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.src.Receive(cctx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	go func() {
		_, err := b.src.Receive(ctx, "q", mqlite.ReceiveOptions{Wait: time.Hour})
		done <- err
	}()
	must(t, b.Store.Close())
	if err := <-done; !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("close: %v", err)
	}
}

func TestConcurrentReceiversClaimEachMessageOnce(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	const total, workers = 10_000, 8
	msgs := make([]outbox.Message, total)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte(fmt.Sprint(i))}
	}
	must(t, b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", msgs)
		return err
	}))
	var mu sync.Mutex
	seen := make(map[int64]int, total)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := b.src.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 16})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, m := range got {
					seen[m.Seq]++
				}
				mu.Unlock()
				for _, m := range got {
					if err := b.src.Complete(ctx, m.Lock()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("claimed %d distinct messages, want %d", len(seen), total)
	}
	for seq, n := range seen {
		if n != 1 {
			t.Fatalf("seq %d claimed %d times", seq, n)
		}
	}
}

func TestDeferredOnLastDeliveryIsDeadLettered(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{MaxDeliveryCount: 1})
	seq := b.send(t, outbox.Message{})[0]
	m := b.receiveOne(t, seq)
	must(t, b.src.Defer(ctx, m.Lock()))
	if _, err := b.src.ReceiveDeferred(ctx, "q", seq); !errors.Is(err, mqlite.ErrMessageNotFound) {
		t.Fatalf("ReceiveDeferred: %v, want ErrMessageNotFound", err)
	}
	dead, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(dead) != 1 || dead[0].Seq != seq || dead[0].DeliveryCount != 1 ||
		dead[0].DeadLetterReason != "max delivery count exceeded" {
		t.Fatalf("dead letters %+v, want seq %d spent after 1 delivery", dead, seq)
	}
}

func TestCompleteBatchGivesEachLockItsOwnResult(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	b.send(t, outbox.Message{}, outbox.Message{}, outbox.Message{}, outbox.Message{})
	msgs := b.receive(t, mqlite.ReceiveOptions{Max: 4})
	if len(msgs) != 4 {
		t.Fatalf("received %d", len(msgs))
	}
	must(t, b.src.Complete(ctx, msgs[1].Lock())) // a replay inside the batch
	stale := msgs[2].Lock()
	stale.Token = "00000000000000000000000000000000"
	res, err := b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[0].Lock(), msgs[1].Lock(), stale, msgs[3].Lock(), msgs[0].Lock()})
	must(t, err)
	for i, want := range []error{nil, nil, mqlite.ErrLockLost, nil, nil} {
		if !errors.Is(res[i], want) || (want == nil && res[i] != nil) {
			t.Errorf("slot %d: %v, want %v", i, res[i], want)
		}
	}
	// Every completed slot left a receipt: the same batch replays.
	res, err = b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[0].Lock(), msgs[3].Lock()})
	must(t, err)
	if res[0] != nil || res[1] != nil {
		t.Fatalf("replay: %v", res)
	}
	// Only the stale slot's message is left, still locked by its holder.
	b.Clock.Advance(lease) // its lease lapses: nothing else may settle it
	res, err = b.Store.CompleteBatch(ctx, []mqlite.Lock{msgs[2].Lock()})
	must(t, err)
	wantLockLost(t, res[0])
	left, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if len(left) != 1 || left[0].Seq != msgs[2].Seq {
		t.Fatalf("left %v, want [%d]", seqsOf(left), msgs[2].Seq)
	}
}
