package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// sendOne sends one message and returns its result, failing on an error
// of the whole call.
func (k *kit) sendOne(queue string, m outbox.Message) outbox.Result {
	k.t.Helper()
	res, err := k.sendAll(queue, m)
	k.must(err, "send")
	return res[0]
}

// wantNew fails unless r is a newly inserted message.
func (k *kit) wantNew(r outbox.Result, what string) int64 {
	k.t.Helper()
	if r.Err != nil || r.Duplicate || r.Seq == 0 {
		k.t.Fatalf("%s: %+v, want a new message", what, r)
	}
	return r.Seq
}

// wantDuplicate fails unless r is a duplicate of seq.
func (k *kit) wantDuplicate(r outbox.Result, seq int64, what string) {
	k.t.Helper()
	if r.Err != nil || !r.Duplicate || r.Seq != seq {
		k.t.Fatalf("%s: %+v, want a duplicate of seq %d", what, r, seq)
	}
}

// dedupTests: a resend with the same MessageID (or, on a queue with
// DedupByBody, the same body when there is none) inside the queue's
// DedupWindow returns the original seq and inserts nothing; without
// DedupByBody every send without a MessageID is a new message; the same id
// with another body is ErrDuplicateConflict; a MessageID never meets a
// content key.
var dedupTests = []subtest{
	{"ResendReturnsOriginal", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		m := outbox.Message{Body: []byte("b"), MessageID: "id"}
		seq := k.wantNew(k.sendOne("q", m), "first send")
		k.wantDuplicate(k.sendOne("q", m), seq, "resend")
		res, err := k.sendAll("q", m, m)
		k.must(err, "batch resend")
		k.wantDuplicate(res[0], seq, "batch slot 0")
		k.wantDuplicate(res[1], seq, "batch slot 1")
		if s := k.stats("q"); s.Total() != 1 {
			t.Fatalf("%d messages, want 1", s.Total())
		}
	}},
	// By default a body is no key: the same body sent twice, alone or in
	// one batch, is two messages, as an outbox's two events are.
	{"BodyIsNoKeyByDefault", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		m := outbox.Message{Body: []byte("same body")}
		a := k.wantNew(k.sendOne("q", m), "first send")
		b := k.wantNew(k.sendOne("q", m), "same body again")
		res, err := k.sendAll("q", m, m)
		k.must(err, "batch of the same body")
		k.expect("q", max10, a, b, k.wantNew(res[0], "batch slot 0"), k.wantNew(res[1], "batch slot 1"))
	}},
	{"ContentKeyWithDedupByBody", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{DedupByBody: true})
		m := outbox.Message{Body: []byte("same body")}
		seq := k.wantNew(k.sendOne("q", m), "first send")
		k.wantDuplicate(k.sendOne("q", m), seq, "same body again")
		res, err := k.sendAll("q", m, outbox.Message{Body: []byte("new body")}, outbox.Message{Body: []byte("new body")})
		k.must(err, "batch")
		k.wantDuplicate(res[0], seq, "batch slot 0")
		other := k.wantNew(res[1], "batch slot 1")
		k.wantDuplicate(res[2], other, "batch slot 2, the body of slot 1")
		// Turned off, bodies are no keys any more; turned on again, the
		// keys written while on are still there.
		k.update("q", mqlite.QueueOptions{})
		third := k.wantNew(k.sendOne("q", m), "same body with DedupByBody off")
		k.update("q", mqlite.QueueOptions{DedupByBody: true})
		k.wantDuplicate(k.sendOne("q", m), seq, "same body with DedupByBody on again")
		k.expect("q", max10, seq, other, third)
	}},
	{"ConflictKeepsOriginal", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		seq := k.wantNew(k.sendOne("q", outbox.Message{Body: []byte("one"), MessageID: "id"}), "first send")
		res, err := k.sendAll("q", outbox.Message{Body: []byte("two"), MessageID: "id"}, outbox.Message{Body: []byte("other")})
		k.must(err, "batch with a conflicting slot")
		if !errors.Is(res[0].Err, mqlite.ErrDuplicateConflict) || res[0].Seq != 0 {
			t.Fatalf("conflicting slot: %+v, want ErrDuplicateConflict and seq 0", res[0])
		}
		other := k.wantNew(res[1], "the batch's other slot")
		msgs := k.expect("q", max10, seq, other)
		if string(msgs[0].Body) != "one" {
			t.Fatalf("the original became %q", msgs[0].Body)
		}
	}},
	{"ResendAfterConsumedIsDuplicate", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		m := outbox.Message{Body: []byte("b"), MessageID: "id"}
		seq := k.wantNew(k.sendOne("q", m), "first send")
		got := k.one("q", seq)
		k.must(k.st.Complete(k.ctx, got.Lock()), "complete")
		k.wantDuplicate(k.sendOne("q", m), seq, "resend after it was consumed")
		k.none("q")
	}},
	// The window passes exactly, for a single send and inside a batch (a
	// batched resend after the window is a new message too).
	{"WindowPasses", func(t *testing.T, h Harness) {
		for _, resend := range []func(k *kit, m outbox.Message) outbox.Result{
			func(k *kit, m outbox.Message) outbox.Result { return k.sendOne("q", m) },
			func(k *kit, m outbox.Message) outbox.Result {
				res, err := k.sendAll("q", m, outbox.Message{})
				k.must(err, "batch")
				return res[0]
			},
		} {
			k := open(t, h)
			k.queue("q", mqlite.QueueOptions{DedupWindow: time.Minute})
			m := outbox.Message{Body: []byte("b"), MessageID: "id"}
			seq := k.wantNew(k.sendOne("q", m), "first send")
			k.advance(time.Minute - time.Millisecond)
			k.wantDuplicate(resend(k, m), seq, "resend inside the window")
			k.advance(2 * time.Millisecond)
			if k.wantNew(resend(k, m), "resend after the window") == seq {
				t.Fatal("the new message reused the seq")
			}
		}
	}},
	{"Disabled", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{DedupWindow: -1})
		m := outbox.Message{Body: []byte("b"), MessageID: "id"}
		k.wantNew(k.sendOne("q", m), "first send")
		k.wantNew(k.sendOne("q", m), "second send")
	}},
	// A user MessageID spelled like a body's content key never collides
	// with it, in either order.
	{"MessageIDNeverMeetsContentKey", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{DedupByBody: true})
		body := []byte("the body")
		sum := sha256.Sum256(body)
		for _, id := range []string{"sha256:" + hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:])} {
			k.wantNew(k.sendOne("q", outbox.Message{Body: k.body(), MessageID: id}), "id "+id)
		}
		k.wantNew(k.sendOne("q", outbox.Message{Body: body}), "the body with no MessageID")
		other := []byte("another body")
		sum = sha256.Sum256(other)
		k.wantNew(k.sendOne("q", outbox.Message{Body: other}), "another body with no MessageID")
		k.wantNew(k.sendOne("q", outbox.Message{Body: k.body(), MessageID: "sha256:" + hex.EncodeToString(sum[:])}),
			"an id spelled like that body's key")
	}},
}
