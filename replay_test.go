package mqlite_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// TestAttemptReplayIsTheSameRequest: a reused AttemptID with other options
// is ErrAttemptConflict; a replay leaves out the deliveries that are no
// longer held (settled, or their lease over), so it never presents a
// message as deliverable when it is not; a held one comes back with its
// renewed lease.
func TestAttemptReplayIsTheSameRequest(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Minute})
	b.send("q", body("a"), body("b"), body("c"), body("d"), body("e"))
	first, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 5, AttemptID: "a"})
	if err != nil || len(first) != 5 {
		t.Fatalf("receive: %d %v", len(first), err)
	}
	for _, opts := range []mqlite.ReceiveOptions{
		{Max: 1, AttemptID: "a", Mode: mqlite.ReceiveAndDelete},
		{Max: 4, AttemptID: "a"},
		{Max: 5, AttemptID: "a", Mode: mqlite.ReceiveAndDelete},
	} {
		if got, err := b.Store.Receive(ctx, "q", opts); !errors.Is(err, mqlite.ErrAttemptConflict) {
			t.Fatalf("%+v: %d messages, %v, want ErrAttemptConflict", opts, len(got), err)
		}
	}
	for _, m := range first[:3] {
		if err := b.Store.Complete(ctx, m.Lock()); err != nil {
			t.Fatal(err)
		}
	}
	b.Clock.Advance(10 * time.Second)
	until, err := b.Store.Renew(ctx, first[3].Lock())
	if err != nil {
		t.Fatal(err)
	}
	replay, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 5, AttemptID: "a"})
	if err != nil || len(replay) != 2 {
		t.Fatalf("replay: %d %v, want the two still held", len(replay), err)
	}
	if replay[0].Seq != first[3].Seq || replay[0].LockToken != first[3].LockToken || !replay[0].LockedUntil.Equal(until) {
		t.Fatalf("replayed %+v, want seq %d with its token and renewed lease %v", replay[0], first[3].Seq, until)
	}
	b.Clock.Advance(55 * time.Second) // the lease of the fifth is over, not the renewed one
	replay, err = b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 5, AttemptID: "a"})
	if err != nil || len(replay) != 1 || replay[0].Seq != first[3].Seq {
		t.Fatalf("replay after a lease ended: %v %v, want only %d", seqsOf(replay), err, first[3].Seq)
	}
}

// TestMessageIDNeverMeetsAContentKey: a MessageID spelled like a content key
// and a body sent without one are two different keys.
func TestMessageIDNeverMeetsAContentKey(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{DedupByBody: true})
	sum := sha256.Sum256([]byte("B"))
	// The spelling the content key once had.
	b.send("q", outbox.Message{Body: []byte("other"), MessageID: "sha256:" + hex.EncodeToString(sum[:])})
	seqs := b.send("q", body("B"), body("B"))
	if seqs[0] == 0 || seqs[1] != seqs[0] {
		t.Fatalf("content-keyed sends: %v, want one new seq replayed", seqs)
	}
	if msgs := b.receive("q", 10); len(msgs) != 2 {
		t.Fatalf("queue holds %d messages, want the id-keyed one and the content-keyed one", len(msgs))
	}
}
