package broker

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestStreamClaimsNothingOnAPausedQueue: a completion that makes room in
// a stream's window on a paused queue is answered, and the claim that
// goes with it (Store.CompleteAndReceive) hands out nothing; the message
// goes out once the queue is resumed (the control).
func TestStreamClaimsNothingOnAPausedQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := openStream(t, 2, outbox.Message{Body: []byte("a")}, outbox.Message{Body: []byte("b")})
		synctest.Wait()
		evs := b.w.events(t)
		if len(evs) != 1 || len(evs[0].Messages) != 2 {
			t.Fatalf("at the open: %+v, want a and b", evs)
		}
		a := evs[0].Messages[0]
		if err := b.st.PauseQueue(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.Send(ctx, b.st, "q", outbox.Message{Body: []byte("c")}); err != nil {
			t.Fatal(err)
		}
		b.line(t, wire.StreamSettle{Complete: []wire.LockRequest{{Seq: a.Seq, Token: a.LockToken}}})
		synctest.Wait()
		evs = b.w.events(t)
		if len(evs) != 2 || len(evs[1].Messages) != 0 || evs[1].Line != 1 || len(evs[1].Results) != 1 || evs[1].Results[0].Error != nil {
			t.Fatalf("on the paused queue: %+v, want only the answer to line 1", evs[1:])
		}
		if err := b.st.ResumeQueue(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		evs = b.w.events(t)
		if len(evs) != 3 || len(evs[2].Messages) != 1 || string(evs[2].Messages[0].Body) != "c" {
			t.Fatalf("after the resume: %+v, want c", evs[2:])
		}
	})
}
