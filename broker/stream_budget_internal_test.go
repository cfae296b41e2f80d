package broker

import (
	"bytes"
	"testing"
	"testing/synctest"

	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// TestStreamClaimsWithinItsByteBudget: every claim of a stream, the wait's
// and the one committed with a line's completions, hands out messages
// within the stream's byte budget (max_bytes), and at least one message
// when the next alone is larger. Six messages of 80 bytes on a window of
// three with a budget of 100: each event carries one message, at the open
// (three waits) and after the line that completes them (the commit's
// claim, then two waits); the last message, larger than the budget, still
// goes out alone. Without the budget the open hands out three at once, and
// the commit's claim three.
func TestStreamClaimsWithinItsByteBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 100
		var send []outbox.Message
		for range 5 {
			send = append(send, outbox.Message{Body: bytes.Repeat([]byte("x"), 80)})
		}
		send = append(send, outbox.Message{Body: bytes.Repeat([]byte("y"), 2*budget)})
		b := openStreamWith(t, streamSetup{window: 3, send: send, budget: budget})
		synctest.Wait() // the window is full
		evs := b.w.events(t)
		if len(evs) != 3 {
			t.Fatalf("at the open: messages per event %v, want [1 1 1]", perEvent(evs))
		}
		var line wire.StreamSettle
		for i, ev := range evs {
			if len(ev.Messages) != 1 {
				t.Fatalf("at the open, event %d hands out %d messages, want 1 (byte budget %d)", i, len(ev.Messages), budget)
			}
			m := ev.Messages[0]
			line.Complete = append(line.Complete, wire.LockRequest{Seq: m.Seq, Token: m.LockToken})
		}
		b.line(t, line)
		synctest.Wait()
		evs = b.w.events(t)[3:]
		if len(evs) != 4 || evs[1].Line != 1 {
			t.Fatalf("after the line: messages per event %v (answer to line 1 at -1), want [1 -1 1 1]", perEvent(evs))
		}
		handed := 0
		for i, ev := range []wire.StreamEvent{evs[0], evs[2], evs[3]} {
			if len(ev.Messages) != 1 {
				t.Fatalf("after the line, claim %d hands out %d messages, want 1 (byte budget %d)", i, len(ev.Messages), budget)
			}
			handed++
		}
		if last := evs[3].Messages[0]; len(last.Body) != 2*budget {
			t.Fatalf("the last message out has %d bytes, want the one of %d, larger than the budget", len(last.Body), 2*budget)
		}
		t.Logf("%d messages handed out one per claim under a byte budget of %d", 3+handed, budget)
	})
}

// perEvent is how many messages each event hands out, -1 for an answer to
// a line.
func perEvent(evs []wire.StreamEvent) []int {
	out := make([]int, len(evs))
	for i, ev := range evs {
		out[i] = len(ev.Messages)
		if ev.Line != 0 {
			out[i] = -1
		}
	}
	return out
}
