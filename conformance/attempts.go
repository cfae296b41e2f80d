package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// tokens returns the lock tokens of msgs.
func tokens(msgs []mqlite.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.LockToken
	}
	return out
}

// attemptTests: a Receive retried with the same AttemptID and options
// inside about 30 minutes, on the same queue, returns what the attempt
// handed out and claims nothing new; anything else claims afresh or is
// ErrAttemptConflict, and a replay never presents a message that is no
// longer held under it (docs/conformance.md, "Receive attempts").
var attemptTests = []subtest{
	{"SameRequestReplays", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 3)
		opts := mqlite.ReceiveOptions{Max: 2, AttemptID: "a"}
		first := k.expect("q", opts, s[0], s[1])
		again := k.expect("q", opts, s[0], s[1])
		if !slices.Equal(tokens(first), tokens(again)) {
			t.Fatalf("replayed tokens %v, want %v", tokens(again), tokens(first))
		}
		for _, m := range again {
			if m.DeliveryCount != 1 {
				t.Fatalf("replay of seq %d counts delivery %d, want 1", m.Seq, m.DeliveryCount)
			}
		}
		for _, m := range k.peek("q")[:2] {
			if m.DeliveryCount != 1 {
				t.Fatalf("seq %d has %d deliveries after a replay, want 1", m.Seq, m.DeliveryCount)
			}
		}
		k.must(k.st.Complete(k.ctx, again[0].Lock()), "complete with a replayed token")
		k.expect("q", mqlite.ReceiveOptions{Max: 2}, s[2])
	}},
	{"ExpiredAttemptClaimsAfresh", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{LockDuration: time.Hour})
		s := k.sendN("q", 2)
		opts := mqlite.ReceiveOptions{AttemptID: "x"}
		k.expect("q", opts, s[0])
		k.advance(replayWindow - time.Second)
		k.expect("q", opts, s[0])
		k.advance(2 * time.Second) // no janitor has run; the lease still runs
		k.expect("q", opts, s[1])
	}},
	{"OtherOptionsConflict", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		k.sendN("q", 3)
		k.receive("q", mqlite.ReceiveOptions{Max: 2, AttemptID: "x"})
		for _, o := range []mqlite.ReceiveOptions{
			{Max: 1, AttemptID: "x"},
			{Max: 3, AttemptID: "x"},
			{Max: 2, AttemptID: "x", Mode: mqlite.ReceiveAndDelete},
		} {
			_, err := k.st.Receive(k.ctx, "q", o)
			k.wantErr(err, mqlite.ErrAttemptConflict, "the same AttemptID with other options")
		}
		if s := k.stats("q"); s.Locked != 2 || s.Active != 1 {
			t.Fatalf("a conflicting Receive changed the queue: %+v", s)
		}
	}},
	// A replay leaves out what was settled or released since: it never
	// hands out a message as deliverable when it is not.
	{"ReplayOmitsSettled", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 3)
		opts := mqlite.ReceiveOptions{Max: 3, AttemptID: "x"}
		msgs := k.expect("q", opts, s...)
		k.must(k.st.Complete(k.ctx, msgs[0].Lock()), "complete")
		k.must(k.st.Abandon(k.ctx, msgs[1].Lock(), 0), "abandon")
		again := k.expect("q", opts, s[2])
		if again[0].LockToken != msgs[2].LockToken {
			t.Fatal("the replay changed the token of a held message")
		}
		k.must(k.st.Complete(k.ctx, again[0].Lock()), "complete")
		k.expect("q", opts)
		k.expect("q", mqlite.ReceiveOptions{Max: 3}, s[1])
	}},
	{"ReplayOmitsLapsedAndReclaimed", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 1)
		opts := mqlite.ReceiveOptions{AttemptID: "x"}
		k.expect("q", opts, s[0])
		k.advance(lease)
		k.expect("q", opts) // lapsed: not presented as held
		cur := k.expect("q", mqlite.ReceiveOptions{}, s[0])
		k.expect("q", opts) // reclaimed by another delivery
		k.must(k.st.Complete(k.ctx, cur[0].Lock()), "complete")
	}},
	{"EmptyResultNotRecorded", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		opts := mqlite.ReceiveOptions{AttemptID: "x"}
		k.expect("q", opts)
		s := k.sendN("q", 1)
		k.expect("q", opts, s[0])
	}},
	// Receive-and-delete messages left the queue in the attempt; its
	// replay returns them as they were handed out.
	{"ReceiveAndDeleteReplays", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		s := k.sendN("q", 3)
		opts := mqlite.ReceiveOptions{Max: 2, AttemptID: "x", Mode: mqlite.ReceiveAndDelete}
		first := k.expect("q", opts, s[0], s[1])
		again := k.expect("q", opts, s[0], s[1])
		for i := range first {
			if string(first[i].Body) != string(again[i].Body) {
				t.Fatalf("replayed body %q, want %q", again[i].Body, first[i].Body)
			}
		}
		k.expect("q", mqlite.ReceiveOptions{Max: 3}, s[2])
	}},
}
