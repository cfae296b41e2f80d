package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

var errRollback = errors.New("conformance: roll back")

var transactionTests = []subtest{
	// A committed message comes back with every field as sent.
	{"CommitKeepsEveryField", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		sent := outbox.Message{Body: []byte("b"), MessageID: "id-1", GroupID: "g", Subject: "s",
			Properties: map[string]string{"k": "v", "k2": ""}, TTL: time.Hour}
		seq := k.send("q", sent)[0]
		m := k.one("q", seq)
		if string(m.Body) != "b" || m.MessageID != "id-1" || m.GroupID != "g" || m.Subject != "s" ||
			!maps.Equal(m.Properties, sent.Properties) || m.Queue != "q" {
			t.Fatalf("received %+v, want the fields as sent", m)
		}
		if !m.EnqueuedAt.Equal(k.clock.Now()) || !m.ExpiresAt.Equal(k.clock.Now().Add(time.Hour)) {
			t.Fatalf("EnqueuedAt %v ExpiresAt %v, want the clock's now and an hour later", m.EnqueuedAt, m.ExpiresAt)
		}
	}},
	// A rolled-back transaction leaves no message, on any queue, and no
	// dedup key: the same MessageID sent afterwards is a new message.
	{"RollbackLeavesNothing", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRollback)
		k := open(t, h)
		k.queue("a", mqlite.QueueOptions{})
		k.queue("b", mqlite.QueueOptions{})
		err := k.in.Tx(k.ctx, func(send SendFunc) error {
			if _, err := send("a", outbox.Message{Body: []byte("x"), MessageID: "m"}); err != nil {
				return err
			}
			if _, err := send("b", outbox.Message{Body: []byte("y")}); err != nil {
				return err
			}
			return errRollback
		})
		k.wantErr(err, errRollback, "Tx")
		k.none("a")
		k.none("b")
		for _, q := range []string{"a", "b"} {
			if s := k.stats(q); s.Total() != 0 {
				t.Fatalf("stats of %s after a rollback: %+v", q, s)
			}
		}
		res, err := k.sendAll("a", outbox.Message{Body: []byte("x"), MessageID: "m"})
		k.must(err, "send after the rollback")
		if res[0].Duplicate || res[0].Err != nil {
			t.Fatalf("the rolled-back MessageID is remembered: %+v", res[0])
		}
	}},
	// A send to a queue that does not exist is ErrQueueNotFound.
	{"UnknownQueue", func(t *testing.T, h Harness) {
		k := open(t, h)
		_, err := k.sendAll("missing", outbox.Message{})
		k.wantErr(err, mqlite.ErrQueueNotFound, "send to a missing queue")
	}},
}

var claimTests = []subtest{
	// A claim locks for exactly LockDuration from now with a token, and
	// counts the delivery; the next delivery has another token.
	{"LeaseTokenAndCount", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		m := k.one("q", seq)
		if m.LockToken == "" || !m.LockedUntil.Equal(k.clock.Now().Add(lease)) || m.DeliveryCount != 1 {
			t.Fatalf("first delivery: token %q until %v count %d, want a token, now+%v, 1",
				m.LockToken, m.LockedUntil, m.DeliveryCount, lease)
		}
		k.must(k.st.Abandon(k.ctx, m.Lock(), 0), "abandon")
		m2 := k.one("q", seq)
		if m2.LockToken == m.LockToken || m2.DeliveryCount != 2 {
			t.Fatalf("second delivery: token %q (first %q) count %d, want a new token and 2",
				m2.LockToken, m.LockToken, m2.DeliveryCount)
		}
	}},
	// Ungrouped messages of a standard queue come in sequence order, at
	// most Max per Receive.
	{"SequenceOrderAndMax", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 5)
		k.expect("q", mqlite.ReceiveOptions{Max: 3}, s[0], s[1], s[2])
		k.expect("q", mqlite.ReceiveOptions{Max: 3}, s[3], s[4])
		k.none("q")
	}},
	// MaxBytes bounds what one Receive or Peek hands out: messages in
	// sequence order while their sizes (body and metadata) add up to at
	// most MaxBytes, and the first whatever its size.
	{"MaxBytesBoundsTheBatch", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		const size = 100
		msgs := make([]outbox.Message, 6)
		for i := range msgs {
			msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "%0*d", size-2, i), MessageID: fmt.Sprintf("m%d", i)}
		}
		s := k.send("q", msgs...)
		peeked, err := k.st.Peek(k.ctx, "q", mqlite.PeekParams{Max: 10, MaxBytes: 2*size + size/2})
		k.must(err, "peek")
		if got := seqs(peeked); !slices.Equal(got, s[:2]) {
			t.Fatalf("peek within %d bytes: seqs %v, want %v", 2*size+size/2, got, s[:2])
		}
		k.expect("q", mqlite.ReceiveOptions{Max: 10, MaxBytes: 2 * size}, s[0], s[1])
		k.expect("q", mqlite.ReceiveOptions{Max: 10, MaxBytes: 1}, s[2])
		k.expect("q", mqlite.ReceiveOptions{Max: 10, MaxBytes: 2*size - 1, Mode: mqlite.ReceiveAndDelete}, s[3])
		k.expect("q", mqlite.ReceiveOptions{Max: 10, MaxBytes: 10 * size}, s[4], s[5])
		_, err = k.st.Receive(k.ctx, "q", mqlite.ReceiveOptions{MaxBytes: -1})
		k.wantErr(err, mqlite.ErrInvalidArgument, "negative MaxBytes")
	}},
	// Peek neither locks nor counts a delivery.
	{"PeekClaimsNothing", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.sendN("q", 1)[0]
		if p := k.peek("q"); len(p) != 1 || p[0].State != mqlite.StateActive || p[0].DeliveryCount != 0 {
			t.Fatalf("peek: %+v", p)
		}
		if m := k.one("q", seq); m.DeliveryCount != 1 {
			t.Fatalf("delivery count after a peek: %d, want 1", m.DeliveryCount)
		}
	}},
	// Concurrent receivers claim every message exactly once.
	{"OneClaimerPerDelivery", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		const n, workers = 200, 4
		k.sendN("q", n)
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for {
					msgs, err := k.st.Receive(k.ctx, "q", mqlite.ReceiveOptions{Max: 1 + w%4})
					if err != nil {
						errs <- err
						return
					}
					if len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						seen[m.Seq]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("receive: %v", err)
		}
		if len(seen) != n {
			t.Fatalf("claimed %d distinct messages, want %d", len(seen), n)
		}
		for seq, c := range seen {
			if c != 1 {
				t.Fatalf("seq %d claimed %d times", seq, c)
			}
		}
	}},
}
