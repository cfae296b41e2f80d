package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// TestRemoteReceiversInStats: two clients' loops over the broker are two
// receivers of the queue in its stats (same key and host, one name each),
// one holding the lease of the message its handler works on; once the
// loops stop they leave after mqlite.ReceiverGrace by the store's clock.
func TestRemoteReceiversInStats(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	url, key := serve(t, b.Bundle, broker.Config{})
	other := newClient(t, url, key, b.Clock)
	working, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, m mqlite.Message) error {
		close(working) // one message is sent
		<-release
		return nil
	}
	var stops []func()
	for _, src := range []consumer.Store{b.src, other} {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- consumer.Loop(lctx, src, "q", hold, consumer.LoopConfig{Prefetch: -1}) }()
		stops = append(stops, func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("loop: %v", err)
			}
		})
	}
	stats := func() mqlite.QueueStats {
		s, err := b.src.Stats(ctx, "q")
		must(t, err)
		return s
	}
	deadline := time.Now().Add(time.Minute)
	for len(stats().Receivers) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("receivers never 2: %+v", stats().Receivers)
		}
		time.Sleep(time.Millisecond)
	}
	b.Send(t, "q", outbox.Message{Body: []byte("work")})
	<-working
	for {
		rs := stats().Receivers
		if rs[0].Locks+rs[1].Locks == 1 {
			for _, r := range rs {
				if r.KeyID == "" || r.Addr != "127.0.0.1" || r.Name == "" {
					t.Fatalf("remote receiver without key, address or name: %+v", r)
				}
			}
			if rs[0].Name == rs[1].Name {
				t.Fatalf("two clients under one name: %+v", rs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lock held: %+v", rs)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for _, stop := range stops {
		stop()
	}
	// The broker sees a cancelled long-poll end a moment after the client.
	for waiting := 1; waiting > 0; {
		waiting = 0
		for _, r := range stats().Receivers {
			waiting += r.Waiting
		}
		if time.Now().After(deadline) {
			t.Fatalf("receives still waiting: %+v", stats().Receivers)
		}
		time.Sleep(time.Millisecond)
	}
	b.Clock.Advance(mqlite.ReceiverGrace)
	if rs := stats().Receivers; len(rs) != 0 {
		t.Fatalf("receivers after the loops stopped and the grace passed: %+v", rs)
	}
}

// TestRemoteLockKeptOnWrongSeq: a Complete over the broker with the
// delivery's token and another seq is ErrLockLost and releases nothing: the
// receiver still holds its one lock in the queue's stats, until the right
// Complete.
func TestRemoteLockKeptOnWrongSeq(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{LockDuration: time.Minute})
	b.Send(t, "q", outbox.Message{})
	got := b.receive(t, mqlite.ReceiveOptions{})
	if len(got) != 1 {
		t.Fatalf("received %d", len(got))
	}
	locks := func() int {
		st, err := b.src.Stats(ctx, "q")
		must(t, err)
		if len(st.Receivers) != 1 {
			t.Fatalf("receivers: %+v", st.Receivers)
		}
		return st.Receivers[0].Locks
	}
	wrong := got[0].Lock()
	wrong.Seq += 1000
	if err := b.src.Complete(ctx, wrong); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("wrong seq: %v, want ErrLockLost", err)
	}
	if n := locks(); n != 1 {
		t.Fatalf("after a wrong seq: %d locks, want 1 (the message is still locked)", n)
	}
	must(t, b.src.Complete(ctx, got[0].Lock()))
	if n := locks(); n != 0 {
		t.Fatalf("after the right lock: %d locks, want 0", n)
	}
}
