package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// The Intake area: a relay.Intake takes a far side's messages into a queue
// of the store, each once by its id, and holds aside what the queue
// refuses while the rest flow. An intake runs in the process that owns the
// store (relay.NewIntake takes the *mqlite.Store): over another
// implementation (the broker's client) the area is skipped.
var intakeTests = []subtest{
	{"TakenOnceByID", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("in", mqlite.QueueOptions{})
		src := k.runIntake("in", intakeMsgs("a", "b", "c")...)
		if got := k.bodiesOf("in"); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue holds %v, want a b c, once each and in order", got)
		}
		src.wantAcked(t, "a", "b", "c")
	}},
	{"DuplicateIDDeduplicated", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("in", mqlite.QueueOptions{})
		// b comes again, as a source delivers again a message whose
		// acknowledgement was lost after the commit.
		src := k.runIntake("in", intakeMsgs("a", "b", "b", "c")...)
		if got := k.bodiesOf("in"); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue holds %v, want b once", got)
		}
		src.wantAcked(t, "a", "b", "b", "c")
	}},
	{"RefusedHeldAsideRestFlow", func(t *testing.T, h Harness) {
		k := open(t, h)
		k.queue("in", mqlite.QueueOptions{})
		msgs := intakeMsgs("a")
		msgs = append(msgs, relay.Inbound{Message: outbox.Message{MessageID: strings.Repeat("x", mqlite.MaxMessageIDLen+1), Body: []byte("long id")}})
		msgs = append(msgs, intakeMsgs("b")...)
		msgs = append(msgs, relay.Inbound{Message: outbox.Message{Body: []byte("no id")}})
		msgs = append(msgs, intakeMsgs("c")...)
		src := k.runIntake("in", msgs...)
		if got := k.bodiesOf("in"); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue holds %v, want a b c", got)
		}
		if got := k.bodiesOf("in.held"); !slices.Equal(got, []string{"long id", "no id"}) {
			t.Fatalf("hold queue holds %v, want the two refused messages", got)
		}
		src.wantAcked(t, strings.Repeat("x", mqlite.MaxMessageIDLen+1), "a", "b", "c", "")
	}},
}

// intakeMsgs returns a message per id, its body the id.
func intakeMsgs(ids ...string) []relay.Inbound {
	out := make([]relay.Inbound, len(ids))
	for i, id := range ids {
		out[i] = relay.Inbound{Message: outbox.Message{MessageID: id, Body: []byte(id)}}
	}
	return out
}

// runIntake runs a relay.Intake of msgs into queue until it acknowledged
// them all, and returns their source. It skips the subtest unless the
// store is the embedded one.
func (k *kit) runIntake(queue string, msgs ...relay.Inbound) *listSource {
	k.t.Helper()
	st := optional[*mqlite.Store](k, "*mqlite.Store (an intake runs in the process that owns the store)")
	src := &listSource{next: msgs, done: make(chan struct{})}
	in, err := relay.NewIntake(st, queue, src, relay.IntakeConfig{MaxBatch: 2, Outage: -1})
	k.must(err, "NewIntake")
	ctx, cancel := context.WithCancel(k.ctx)
	ran := make(chan error, 1)
	go func() { ran <- in.Run(ctx) }()
	select {
	case <-src.done:
	case err := <-ran:
		cancel()
		k.t.Fatalf("the intake stopped early: %v", err)
	case <-time.After(time.Minute):
		cancel()
		k.t.Fatalf("the intake stalled: %d messages left, %d acknowledged", len(src.left()), len(src.ackedIDs()))
	}
	cancel()
	k.must(<-ran, "Run")
	return src
}

// listSource is a relay.Source of a fixed list: it delivers the list in
// order, each message given back first again, and closes done once it has
// acknowledged every message.
type listSource struct {
	mu    sync.Mutex
	next  []relay.Inbound
	acked []string
	out   int // delivered, not yet acknowledged or given back
	done  chan struct{}
}

func (s *listSource) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	s.mu.Lock()
	if len(s.next) == 0 {
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	n := min(max, len(s.next))
	out := slices.Clone(s.next[:n])
	s.next = s.next[n:]
	s.out += n
	s.mu.Unlock()
	return out, nil
}

func (s *listSource) Ack(_ context.Context, msgs []relay.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.acked = append(s.acked, m.MessageID)
	}
	s.out -= len(msgs)
	if s.out == 0 && len(s.next) == 0 {
		close(s.done)
	}
	return nil
}

func (s *listSource) Nack(_ context.Context, msgs []relay.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = append(slices.Clone(msgs), s.next...)
	s.out -= len(msgs)
	return nil
}

func (s *listSource) Redelivery() time.Duration { return time.Second }

func (s *listSource) left() []relay.Inbound {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.next)
}

func (s *listSource) ackedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acked)
}

// wantAcked fails t unless the source acknowledged exactly ids, in any
// order, each delivery once.
func (s *listSource) wantAcked(t *testing.T, ids ...string) {
	t.Helper()
	got := s.ackedIDs()
	slices.Sort(got)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("acknowledged %s, want %s", fmt.Sprintf("%.40q", got), fmt.Sprintf("%.40q", want))
	}
}
