package client_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// TestAttemptHistoryOverTheBroker: an abandon and a reject through the
// broker each record an attempt whose worker is the client's instance at
// its host; Peek, Find, the next Receive and PeekDeadLetters over the
// broker carry the history whole, as the store keeps it.
func TestAttemptHistoryOverTheBroker(t *testing.T) {
	b := setup(t, mqlite.QueueOptions{MaxDeliveryCount: 5})
	seq := b.Send(t, "q", outbox.Message{Body: []byte("x")})[0]
	m := b.receive(t, mqlite.ReceiveOptions{})[0]
	must(t, b.src.AbandonWithReason(ctx, m.Lock(), 0, "db down"))
	peeked, err := b.src.Peek(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	found, err := b.src.Find(ctx, "q", mqlite.FindParams{})
	must(t, err)
	m = b.receive(t, mqlite.ReceiveOptions{})[0]
	for what, got := range map[string][]mqlite.Message{"peek": peeked, "find": found.Messages, "receive": {m}} {
		if len(got) != 1 || got[0].Seq != seq || len(got[0].Attempts) != 1 {
			t.Fatalf("%s: %+v, want message %d with one attempt", what, got, seq)
		}
		a := got[0].Attempts[0]
		if a.Error != "db down" || !a.At.Equal(b.Clock.Now()) || !strings.HasSuffix(a.Worker, "@127.0.0.1") {
			t.Fatalf("%s: attempt %+v, want db down, now, by the client at 127.0.0.1", what, a)
		}
	}
	must(t, b.src.Reject(ctx, m.Lock(), "poison", "bad body"))
	dead, err := b.src.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	var errs []string
	for _, a := range dead[0].Attempts {
		errs = append(errs, a.Error)
	}
	if want := []string{"db down", "poison: bad body"}; len(dead) != 1 || !slices.Equal(errs, want) {
		t.Fatalf("dead letters: %+v, want one with the attempts %q", dead, want)
	}
	local, err := b.Store.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
	must(t, err)
	if !slices.EqualFunc(local[0].Attempts, dead[0].Attempts, func(a, b mqlite.Attempt) bool {
		return a.At.Equal(b.At) && a.Error == b.Error && a.Worker == b.Worker
	}) {
		t.Fatalf("the store keeps %+v, the broker answered %+v", local[0].Attempts, dead[0].Attempts)
	}
}
