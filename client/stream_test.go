package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// receiveN takes messages from the stream until it has n.
func receiveN(t *testing.T, s *client.Stream, n int) []mqlite.Message {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []mqlite.Message
	for len(out) < n {
		msgs, err := s.Receive(rctx)
		if err != nil {
			t.Fatalf("stream receive after %d of %d: %v", len(out), n, err)
		}
		out = append(out, msgs...)
	}
	return out
}

// TestStream: a stream hands out no more than its window unsettled; each
// settlement on it makes room for one more; a lost lock gets its own
// error; what it handed out stays locked when it closes, and settles
// through the plain calls.
func TestStream(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{})
	for range 10 {
		b.Send(t, "q", outbox.Message{})
	}
	s, err := b.src.Stream(ctx, "q", 3)
	must(t, err)
	defer s.Close()
	first := receiveN(t, s, 3)
	if st, err := b.Store.Stats(ctx, "q"); err != nil || st.Locked != 3 {
		t.Fatalf("locked %+v (%v), want the window of 3", st, err)
	}
	stale := first[1].Lock()
	stale.Token = strings.Repeat("0", len(stale.Token))
	res, err := s.CompleteBatch(ctx, []mqlite.Lock{first[0].Lock(), stale})
	must(t, err)
	if res[0] != nil || !errors.Is(res[1], mqlite.ErrLockLost) {
		t.Fatalf("results %v, want nil and ErrLockLost", res)
	}
	// Two places freed (a lost lock is no longer the stream's): two more.
	more := receiveN(t, s, 2)
	must(t, s.Abandon(ctx, more[0].Lock(), 0))
	must(t, s.Reject(ctx, more[1].Lock(), "bad", "a test"))
	must(t, s.Release(ctx, first[1].Lock()))
	again := receiveN(t, s, 2) // first[2] still holds the third place
	must(t, s.Close())
	if _, err := s.Receive(ctx); !errors.Is(err, client.ErrStreamClosed) {
		t.Fatalf("receive after close: %v", err)
	}
	for _, m := range append(again, first[2]) {
		must(t, b.src.Complete(ctx, m.Lock())) // a closed stream's deliveries settle as any
	}
	st, err := b.Store.Stats(ctx, "q")
	must(t, err)
	// 10 sent: 4 completed, 1 dead-lettered; left: first[1] (locked under
	// its real token, released) and 4 active.
	if st.Locked != 1 || st.Active != 4 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamDroppedGivesBackByLease: a stream whose connection breaks
// loses nothing: its deliveries come back when their leases end.
func TestStreamDroppedGivesBackByLease(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{LockDuration: 5 * time.Second})
	b.Send(t, "q", outbox.Message{}, outbox.Message{})
	sctx, cancel := context.WithCancel(ctx)
	s, err := b.src.Stream(sctx, "q", 2)
	must(t, err)
	got := receiveN(t, s, 2)
	cancel() // the connection drops, nothing settled
	must(t, s.Close())
	if msgs := b.receive(t, mqlite.ReceiveOptions{Max: 2}); len(msgs) != 0 {
		t.Fatalf("claimed %v while the leases run", testdb.Seqs(msgs))
	}
	b.Clock.Advance(6 * time.Second)
	back := b.receive(t, mqlite.ReceiveOptions{Max: 2})
	if len(back) != 2 || back[0].Seq != got[0].Seq || back[0].DeliveryCount != 2 {
		t.Fatalf("after the leases: %+v, want %v again", testdb.Seqs(back), testdb.Seqs(got))
	}
}

// TestStreamRevoked: revoking the key ends its stream with 401 and gives
// what it held back at once; a key without the queue cannot open one.
func TestStreamRevoked(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	tb.Queue(t, "other", mqlite.QueueOptions{LockDuration: lease})
	url, admin := serve(t, tb, broker.Config{})
	ac := newClient(t, url, admin, tb.Clock)
	k, secret, err := ac.CreateKey(ctx, "consumer", []string{"q"})
	must(t, err)
	cc := newClient(t, url, secret, tb.Clock)
	if _, err := cc.Stream(ctx, "other", 1); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a stream of a queue the key does not cover: %v", err)
	}
	_, err = ac.Send(ctx, "q", outbox.Message{Body: []byte("x")})
	must(t, err)
	s, err := cc.Stream(ctx, "q", 1)
	must(t, err)
	defer s.Close()
	receiveN(t, s, 1)
	must(t, ac.RevokeKey(ctx, k.ID))
	if _, err := s.Receive(ctx); !errors.Is(err, client.ErrStreamClosed) || !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("stream after revocation: %v", err)
	}
	if msgs, err := ac.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil || len(msgs) != 1 {
		t.Fatalf("the revoked stream's message is not back at once: %v %v", msgs, err)
	}
}

// TestStreamRefusesBadLines: a line that is not a settlement object ends
// the stream with 400 malformed, and a too-large window is refused at the
// open.
func TestStreamRefusesBadLines(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	url, key := serve(t, tb, broker.Config{MaxBatch: 10})
	c := newClient(t, url, key, tb.Clock)
	if _, err := c.Stream(ctx, "q", 11); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("window over the max batch: %v", err)
	}
	for _, line := range []string{"[1]\n", `{"complete": [], "extra": 1}` + "\n", "{\"release\": [1,2,3,4,5,6,7,8,9,10,11]}\n", "\xff\n"} {
		req, err := http.NewRequest(http.MethodPost, url+"/v1/queues/q/stream?window=1", strings.NewReader(line))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"error"`) {
			t.Errorf("line %q: %d %s, want an error line", line, resp.StatusCode, body)
		}
	}
}
