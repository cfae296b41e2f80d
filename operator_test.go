package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestPeekDeadLettersShowsWhyAndWhen: reason, description, delivery count
// and time of each dead letter.
func TestPeekDeadLettersShowsWhyAndWhen(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{})
	seq := b.deadLetter("q", body("x"))[0]
	m := b.wantState("q", seq, mqlite.StateDeadLettered)
	if m.DeadLetterReason != "test" || m.DeadLetterDescription != "dead on purpose" ||
		m.DeliveryCount != 1 || !m.DeadLetteredAt.Equal(b.Clock.Now()) || string(m.Body) != "x" {
		t.Fatalf("dead letter: %+v", m)
	}
}

// TestRedrive: chosen or all dead letters come back active with their count
// at zero and the dead-letter fields cleared; they are delivered again.
func TestRedrive(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{MaxDeliveryCount: 1})
	seqs := b.deadLetter("q", body("a"), body("b"), body("c"))
	b.Clock.Advance(time.Minute)

	n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{Seqs: []int64{seqs[1], 999_999}})
	if err != nil || n != 1 {
		t.Fatalf("redrive one: %d %v", n, err)
	}
	m := b.wantState("q", seqs[1], mqlite.StateActive)
	if m.DeliveryCount != 0 || m.DeadLetterReason != "" || m.DeadLetterDescription != "" || !m.DeadLetteredAt.IsZero() {
		t.Fatalf("redriven: %+v", m)
	}
	got := b.receive("q", 10)
	if len(got) != 1 || got[0].Seq != seqs[1] || got[0].DeliveryCount != 1 {
		t.Fatalf("after redrive received %+v", got)
	}
	if err := b.Store.Complete(ctx, got[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil || n != 2 {
		t.Fatalf("redrive all: %d %v", n, err)
	}
	if got := b.receive("q", 10); len(got) != 2 {
		t.Fatalf("after redrive all received %d, want 2", len(got))
	}
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil || n != 0 {
		t.Fatalf("redrive of nothing: %d %v", n, err)
	}
	if _, err := b.Store.Redrive(ctx, "nope", mqlite.RedriveOptions{}); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	if _, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{Seqs: []int64{0}}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("bad seq: %v", err)
	}
}

// TestRedriveExpiredAndGrouped: a TTL dead letter comes back without its
// spent TTL (it is not expired again at once), and a grouped one rejoins its
// group in order.
func TestRedriveExpiredAndGrouped(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "ttl", mqlite.QueueOptions{DeadLetterOnExpire: true})
	seq := b.send("ttl", outbox.Message{Body: []byte("x"), TTL: time.Second})[0]
	b.Clock.Advance(time.Second)
	b.sweepNow()
	b.wantState("ttl", seq, mqlite.StateDeadLettered)
	if n, err := b.Store.Redrive(ctx, "ttl", mqlite.RedriveOptions{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	b.sweepNow()
	if m := b.wantState("ttl", seq, mqlite.StateActive); !m.ExpiresAt.IsZero() {
		t.Fatalf("redriven message still expires at %v", m.ExpiresAt)
	}

	b.Queue(t, "fifo", mqlite.QueueOptions{Ordering: mqlite.FIFO})
	s := b.send("fifo", body("1"), body("2"))
	first := b.receive("fifo", 1)
	if err := b.Store.Reject(ctx, first[0].Lock(), "r", ""); err != nil {
		t.Fatal(err)
	}
	second := b.receive("fifo", 1)
	if len(second) != 1 || second[0].Seq != s[1] {
		t.Fatalf("the group did not move on: %+v", second)
	}
	if _, err := b.Store.Redrive(ctx, "fifo", mqlite.RedriveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Complete(ctx, second[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if got := b.receive("fifo", 10); len(got) != 1 || got[0].Seq != s[0] {
		t.Fatalf("redriven group head: %+v", got)
	}
}

// TestPurge removes messages by state, in batches, and refuses bad input.
func TestPurge(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	const many = 1234 // several purge batches
	msgs := make([]outbox.Message, many)
	for i := range msgs {
		msgs[i] = body(fmt.Sprint("m", i))
	}
	b.send("q", msgs...)
	b.deadLetter("q", body("dead1"), body("dead2"))
	b.send("q", outbox.Message{Body: []byte("later"), DeliverAt: b.Clock.Now().Add(time.Hour)})

	for _, tc := range []struct {
		state mqlite.State
		want  int
	}{
		{mqlite.StateDeferred, 0},
		{mqlite.StateScheduled, 1},
		{mqlite.StateDeadLettered, 2},
		{mqlite.StateActive, many},
	} {
		if n, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: tc.state}); err != nil || n != tc.want {
			t.Fatalf("purge %s: %d %v, want %d", tc.state, n, err, tc.want)
		}
	}
	if st, err := b.Store.Stats(ctx, "q"); err != nil || st.Total() != 0 {
		t.Fatalf("after purging all: %+v %v", st, err)
	}

	// Purging locked messages fences their consumers out.
	b.send("q", body("held"))
	got := b.receive("q", 1)
	if n, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateLocked}); err != nil || n != 1 {
		t.Fatalf("purge locked: %d %v", n, err)
	}
	if err := b.Store.Complete(ctx, got[0].Lock()); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("complete after purge: %v, want ErrLockLost", err)
	}

	for _, state := range []mqlite.State{"", "completed", "bogus"} {
		if _, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: state}); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("purge %q: %v, want ErrInvalidArgument", state, err)
		}
	}
	if _, err := b.Store.Purge(ctx, "nope", mqlite.PurgeOptions{State: mqlite.StateActive}); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Errorf("unknown queue: %v", err)
	}
}

// TestPurgeSelected removes only the listed messages that are in the
// state: a listed seq of another state, of another queue or of no message
// is skipped, and nothing else moves; a bad seq is refused whole.
func TestPurgeSelected(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.Queue(t, "other", mqlite.QueueOptions{})
	dead := b.deadLetter("q", body("d1"), body("d2"), body("d3"))
	otherDead := b.deadLetter("other", body("o1"))
	live := b.send("q", body("live"))
	n, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateDeadLettered,
		Seqs: []int64{dead[0], dead[2], live[0], otherDead[0], 99999}})
	if err != nil || n != 2 {
		t.Fatalf("purge selected: %d %v, want 2", n, err)
	}
	left, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	if err != nil || len(left) != 1 || left[0].Seq != dead[1] {
		t.Fatalf("dead letters left: %v %v, want [%d]", testdb.Seqs(left), err, dead[1])
	}
	for _, q := range []string{"q", "other"} {
		st, err := b.Store.Stats(ctx, q)
		if err != nil || st.Total() != 2 && q == "q" || st.Total() != 1 && q == "other" {
			t.Fatalf("%s after the purge: %+v %v", q, st, err)
		}
	}
	if _, err := b.Store.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateDeadLettered, Seqs: []int64{dead[1], 0}}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("a zero seq: %v, want ErrInvalidArgument", err)
	}
	if left, _ := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{}); len(left) != 1 {
		t.Fatalf("a refused purge removed %d dead letters", 1-len(left))
	}
}

// TestStats counts per state, sums body bytes and ages on the store's
// clock.
func TestStats(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.Queue(t, "other", mqlite.QueueOptions{})
	b.send("other", body("not counted"))
	if st, err := b.Store.Stats(ctx, "q"); err != nil || !reflect.DeepEqual(st, mqlite.QueueStats{Queue: "q"}) {
		t.Fatalf("empty queue: %+v %v", st, err)
	}
	b.deadLetter("q", body("dead!")) // 5 bytes
	b.Clock.Advance(10 * time.Second)
	b.send("q", body("1"), body("22"), body("333"), body("4444"),
		outbox.Message{Body: []byte("55555"), DeliverAt: b.Clock.Now().Add(time.Hour)})
	received := time.UnixMilli(b.Clock.Now().UnixMilli())
	got := b.receive("q", 2) // "1" and "22" locked
	if err := b.Store.Defer(ctx, got[1].Lock()); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(5 * time.Second)
	st, err := b.Store.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := mqlite.QueueStats{
		Queue: "q", Active: 2, Scheduled: 1, Locked: 1, Deferred: 1, DeadLettered: 1,
		Bytes: 5 + 1 + 2 + 3 + 4 + 5, DeadLetterBytes: 5,
		OldestAge: 5 * time.Second, OldestDeadLetterAge: 15 * time.Second,
		// deadLetter sent, received and rejected one; then 5 sends, 2 receives.
		Counters: mqlite.QueueCounters{Sent: 6, Received: 3, Rejected: 1, DeadLettered: 1},
		// The test's Receive, untagged: "1" is still held, "22" deferred.
		Receivers: []mqlite.Receiver{{Queue: "q", ReceiverTag: mqlite.ReceiverTag{Name: "in-process"},
			Locks: 1, LastSeen: received}},
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("stats\n got %+v\nwant %+v", st, want)
	}
	if st.Total() != 6 {
		t.Fatalf("total %d", st.Total())
	}
	if _, err := b.Store.Stats(ctx, "nope"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	if _, err := b.Store.Stats(ctx, "bad name!"); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
}

// TestRedriveKeepsGroupsOneAtATime: a redriven message never overtakes a
// member of its group in flight; it comes next, in sequence order, once the
// in-flight one leaves. Before an active front it takes its place in order.
func TestRedriveKeepsGroupsOneAtATime(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	g := func(s string) outbox.Message { return outbox.Message{Body: []byte(s), GroupID: "G"} }
	seqs := b.send("q", g("g1"), g("g2"), g("g3"))

	g1 := b.receive("q", 10)
	if len(g1) != 1 || g1[0].Seq != seqs[0] {
		t.Fatalf("first receive: %+v", g1)
	}
	if err := b.Store.Reject(ctx, g1[0].Lock(), "bad", ""); err != nil {
		t.Fatal(err)
	}
	g2 := b.receive("q", 10)
	if len(g2) != 1 || g2[0].Seq != seqs[1] {
		t.Fatalf("second receive: %+v", g2)
	}
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	if got := b.receive("q", 10); len(got) != 0 {
		t.Fatalf("while g2 is locked the group handed out %v", seqsOf(got))
	}
	if err := b.Store.Complete(ctx, g2[0].Lock()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{seqs[0], seqs[2]} {
		got := b.receive("q", 10)
		if len(got) != 1 || got[0].Seq != want {
			t.Fatalf("received %v, want only %d", seqsOf(got), want)
		}
		if err := b.Store.Complete(ctx, got[0].Lock()); err != nil {
			t.Fatal(err)
		}
	}

	// The in-flight front that comes back to active (abandoned) hands the
	// group over to the earlier redriven message.
	seqs = b.send("q", g("k1"), g("k2"))
	k1 := b.receive("q", 1)
	if err := b.Store.Reject(ctx, k1[0].Lock(), "bad", ""); err != nil {
		t.Fatal(err)
	}
	k2 := b.receive("q", 1)
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	if err := b.Store.Abandon(ctx, k2[0].Lock(), 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range seqs {
		got := b.receive("q", 10)
		if len(got) != 1 || got[0].Seq != want {
			t.Fatalf("after the abandon received %v, want only %d", seqsOf(got), want)
		}
		if err := b.Store.Complete(ctx, got[0].Lock()); err != nil {
			t.Fatal(err)
		}
	}

	// Before an active front the redriven message goes first, in order.
	seqs = b.send("q", g("h1"), g("h2"))
	h1 := b.receive("q", 1)
	if err := b.Store.Reject(ctx, h1[0].Lock(), "bad", ""); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Store.Redrive(ctx, "q", mqlite.RedriveOptions{}); err != nil || n != 1 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	if got := b.receive("q", 10); len(got) != 1 || got[0].Seq != seqs[0] {
		t.Fatalf("received %v, want only the redriven %d", seqsOf(got), seqs[0])
	}
}

func seqsOf(msgs []mqlite.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

// TestRejectBoundsItsText: an oversize or non-UTF-8 reason or description
// is ErrInvalidArgument and leaves the delivery held; a valid one settles.
func TestRejectBoundsItsText(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{})
	b.send("q", body("x"))
	m := b.receive("q", 1)[0]
	for _, tc := range []struct{ reason, description string }{
		{strings.Repeat("r", mqlite.MaxReasonLen+1), ""},
		{"r", strings.Repeat("d", mqlite.MaxDescriptionLen+1)},
		{"\xff", ""},
		{"r", "\xfe"},
	} {
		if err := b.Store.Reject(ctx, m.Lock(), tc.reason, tc.description); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Fatalf("reject with %d/%d bytes: %v, want ErrInvalidArgument", len(tc.reason), len(tc.description), err)
		}
	}
	b.wantState("q", m.Seq, mqlite.StateLocked)
	if err := b.Store.Reject(ctx, m.Lock(), strings.Repeat("r", mqlite.MaxReasonLen), "d"); err != nil {
		t.Fatal(err)
	}
	b.wantState("q", m.Seq, mqlite.StateDeadLettered)
}
