package mqlite_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestFind filters by state, subject prefix, MessageID and property, pages
// by seq within the scan bound, and refuses bad filters.
func TestFind(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	tb.Queue(t, "other", mqlite.QueueOptions{})
	st, ctx := tb.Store, context.Background()
	var seqs []int64
	for i, m := range []outbox.Message{
		{Subject: "order.placed", MessageID: "o-1", Properties: map[string]string{"tenant": "a"}},
		{Subject: "order.shipped", MessageID: "o-2", Properties: map[string]string{"tenant": "b"}},
		{Subject: "invoice.sent", MessageID: "i-1", Properties: map[string]string{"tenant": "a"}},
		{Subject: "order.placed", MessageID: "o-3"},
	} {
		m.Body = []byte{byte('a' + i)}
		seqs = append(seqs, sendCommitted(t, st, "q", m))
	}
	sendCommitted(t, st, "other", outbox.Message{Body: []byte("x"), Subject: "order.placed", MessageID: "o-1"})
	got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{}) // seqs[0] locked
	if err != nil || len(got) != 1 {
		t.Fatal(err)
	}
	of := func(ms []mqlite.Message) []int64 {
		out := []int64{}
		for _, m := range ms {
			out = append(out, m.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		opts mqlite.FindParams
		want []int64
		next int64
	}{
		{"everything", mqlite.FindParams{}, seqs, 0},
		{"state", mqlite.FindParams{State: mqlite.StateLocked}, seqs[:1], 0},
		{"subject prefix", mqlite.FindParams{SubjectPrefix: "order."}, []int64{seqs[0], seqs[1], seqs[3]}, 0},
		{"message id", mqlite.FindParams{MessageID: "o-2"}, seqs[1:2], 0},
		{"property", mqlite.FindParams{PropertyKey: "tenant", PropertyValue: "a"}, []int64{seqs[0], seqs[2]}, 0},
		{"two filters", mqlite.FindParams{SubjectPrefix: "order.", PropertyKey: "tenant", PropertyValue: "a"}, seqs[:1], 0},
		{"a page of the scan", mqlite.FindParams{SubjectPrefix: "invoice", ScanMax: 2}, []int64{}, seqs[1] + 1},
		{"the next page", mqlite.FindParams{SubjectPrefix: "invoice", ScanMax: 2, FromSeq: seqs[1] + 1}, seqs[2:3], seqs[3] + 1},
		{"the last page", mqlite.FindParams{SubjectPrefix: "invoice", ScanMax: 2, FromSeq: seqs[3] + 1}, []int64{}, 0},
		{"max", mqlite.FindParams{Max: 1, FromSeq: seqs[1]}, seqs[1:2], seqs[1] + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := st.Find(ctx, "q", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if g := of(res.Messages); len(g) != len(tc.want) || (len(g) > 0 && !slices.Equal(g, tc.want)) || res.NextSeq != tc.next {
				t.Fatalf("got %v next %d, want %v next %d", g, res.NextSeq, tc.want, tc.next)
			}
			for _, m := range res.Messages {
				if m.LockToken != "" || m.State == "" {
					t.Fatalf("message %d: token %q state %q", m.Seq, m.LockToken, m.State)
				}
			}
		})
	}
	for _, bad := range []mqlite.FindParams{
		{State: "gone"}, {ScanMax: -1}, {ScanMax: mqlite.MaxFindScan + 1}, {PropertyValue: "a"},
		{SubjectPrefix: "\xff"}, {Max: 5000},
	} {
		if _, err := st.Find(ctx, "q", bad); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := st.Find(ctx, "nope", mqlite.FindParams{}); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Errorf("unknown queue: %v", err)
	}
}

// TestFindPromises pins what Find promises beyond the happy path: without a
// state it shows live messages only (no completed row of a completed message,
// no dead letter); the subject filter is a prefix, not a substring; the
// property filter is that key's value, not any key's; MaxBytes cuts a page
// and NextSeq goes on after it.
func TestFindPromises(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	st, ctx := tb.Store, context.Background()
	send := func(m outbox.Message) int64 { return sendCommitted(t, st, "q", m) }
	completed := send(outbox.Message{Body: []byte("done"), Subject: "order.placed"})
	dead := send(outbox.Message{Body: []byte("dead"), Subject: "order.placed"})
	for _, want := range []int64{completed, dead} {
		got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{})
		if err != nil || len(got) != 1 || got[0].Seq != want {
			t.Fatalf("receive: %v %v, want seq %d", got, err, want)
		}
		if want == completed {
			err = st.Complete(ctx, got[0].Lock())
		} else {
			err = st.Reject(ctx, got[0].Lock(), "bad", "")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var state string
	if err := st.DB().QueryRowContext(ctx, `SELECT state FROM mqlite_messages WHERE id = ?`, completed).Scan(&state); err != nil || state != "completed" {
		t.Fatalf("the completed message is %q (%v), want its completed row", state, err)
	}
	placed := send(outbox.Message{Body: []byte("0123456789"), Subject: "order.placed", Properties: map[string]string{"tenant": "a"}})
	inner := send(outbox.Message{Body: []byte("0123456789"), Subject: "x.order.placed", Properties: map[string]string{"owner": "a"}})
	other := send(outbox.Message{Body: []byte("0123456789"), Subject: "invoice", Properties: map[string]string{"tenant": "b"}})
	size := int64(len("0123456789") + len("order.placed") + len(`{"tenant":"a"}`))
	for _, tc := range []struct {
		name string
		opts mqlite.FindParams
		want []int64
		next int64
	}{
		{"live only", mqlite.FindParams{}, []int64{placed, inner, other}, 0},
		{"dead letters by state", mqlite.FindParams{State: mqlite.StateDeadLettered}, []int64{dead}, 0},
		{"a prefix, not a substring", mqlite.FindParams{SubjectPrefix: "order."}, []int64{placed}, 0},
		{"that key's value", mqlite.FindParams{PropertyKey: "tenant", PropertyValue: "a"}, []int64{placed}, 0},
		{"a page within MaxBytes", mqlite.FindParams{MaxBytes: size}, []int64{placed}, placed + 1},
		{"one message over MaxBytes", mqlite.FindParams{MaxBytes: 1, FromSeq: inner}, []int64{inner}, inner + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := st.Find(ctx, "q", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, m := range res.Messages {
				got = append(got, m.Seq)
			}
			if !slices.Equal(got, tc.want) || res.NextSeq != tc.next {
				t.Fatalf("got %v next %d, want %v next %d", got, res.NextSeq, tc.want, tc.next)
			}
		})
	}
}

// TestBrowsePagesListEachOnce: paging through a queue with two groups
// (their later members held), a locked front and ungrouped messages, two
// at a time, Peek and Find list every live message once, in sequence
// order.
func TestBrowsePagesListEachOnce(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	st, ctx := tb.Store, context.Background()
	var want []int64
	for i, g := range []string{"a", "a", "", "b", "a", "b", "", "a", "b", "a"} {
		want = append(want, sendCommitted(t, st, "q", outbox.Message{Body: []byte{byte('0' + i)}, GroupID: g}))
	}
	if got, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil || len(got) != 1 || got[0].Seq != want[0] {
		t.Fatalf("receive: %v %v", got, err)
	}
	var peeked, found []int64
	for from := int64(0); ; {
		ms, err := st.Peek(ctx, "q", mqlite.PeekParams{FromSeq: from, Max: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			peeked = append(peeked, m.Seq)
			from = m.Seq + 1
		}
	}
	for from := int64(0); ; {
		res, err := st.Find(ctx, "q", mqlite.FindParams{FromSeq: from, Max: 2, ScanMax: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Messages {
			found = append(found, m.Seq)
		}
		if res.NextSeq == 0 {
			break
		}
		from = res.NextSeq
	}
	if !slices.Equal(peeked, want) || !slices.Equal(found, want) {
		t.Fatalf("peek %v, find %v; want %v", peeked, found, want)
	}
}
