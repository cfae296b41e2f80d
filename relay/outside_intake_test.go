package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// An outsider's view of an Intake's hold queue, from the package doc: a
// message the queue refuses is held aside (not lost, not retried for ever)
// while the rest flow, and a delivery again of the same poisoned message
// adds no second record.

// outsideSource hands out its messages in batches, then waits for ctx; it
// records what was acknowledged and given back.
type outsideSource struct {
	mu            sync.Mutex
	pending       []relay.Inbound
	acked         map[any]int
	nacked        int
	nackedOrigins []string
	allAck        chan struct{} // closed once want messages were acknowledged
	want          int
	closed        bool
	fetched       chan struct{} // when set, closed at the first Fetch
}

func (s *outsideSource) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	s.mu.Lock()
	if s.fetched != nil {
		close(s.fetched)
		s.fetched = nil
	}
	if len(s.pending) > 0 {
		n := min(max, len(s.pending))
		out := s.pending[:n:n]
		s.pending = s.pending[n:]
		s.mu.Unlock()
		return out, nil
	}
	s.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *outsideSource) Ack(_ context.Context, msgs []relay.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, m := range msgs {
		s.acked[m.Ref]++
	}
	for _, n := range s.acked {
		total += n
	}
	if total >= s.want && !s.closed {
		s.closed = true
		close(s.allAck)
	}
	return nil
}

func (s *outsideSource) Nack(_ context.Context, msgs []relay.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nacked += len(msgs)
	for _, m := range msgs {
		s.nackedOrigins = append(s.nackedOrigins, m.Origin)
	}
	s.pending = append(append([]relay.Inbound(nil), msgs...), s.pending...)
	return nil
}

func (s *outsideSource) Redelivery() time.Duration { return time.Minute }

type outsideHeld struct {
	mu      sync.Mutex
	refused int
	taken   int
}

func (h *outsideHeld) Taken(string, relay.Inbound, bool) { h.mu.Lock(); h.taken++; h.mu.Unlock() }
func (h *outsideHeld) Held(_ string, reason string, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if reason == "refused" {
		h.refused++
	}
}

func TestOutsideIntakeHoldsPoisonAside(t *testing.T) {
	ctx := context.Background()
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	if err := st.CreateQueue(ctx, "in", mqlite.QueueOptions{DedupWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	poison := []outbox.Message{
		{Body: []byte("no id")},
		{MessageID: strings.Repeat("x", mqlite.MaxMessageIDLen+1), Body: []byte("long id")},
		{MessageID: "bad\xff", Body: []byte("invalid id")},
		{MessageID: "bad-prop", Body: []byte("invalid header"), Properties: map[string]string{"k": "\xfe"}},
		{MessageID: "big-props", Body: []byte("big props"), Properties: map[string]string{"k": strings.Repeat("v", mqlite.MaxPropertiesBytes+1)}},
		{MessageID: "too-large", Body: make([]byte, mqlite.DefaultMaxMessageBytes+1)},
		{MessageID: "good-3", Body: []byte("another body for good-3's id")}, // conflicts with good-3 below, later in the batch
	}
	var msgs []relay.Inbound
	ref := 0
	add := func(m outbox.Message) {
		msgs = append(msgs, relay.Inbound{Message: m, Ref: ref, Origin: fmt.Sprint("fake #", ref)})
		ref++
	}
	for i := range 10 {
		add(outbox.Message{MessageID: fmt.Sprint("good-", i), Body: []byte(fmt.Sprint("good ", i))})
		if i < len(poison) {
			add(poison[i])
		}
	}
	// The same poisoned messages again, as a source delivers them after a
	// lost acknowledgement: no second record.
	for _, m := range poison {
		add(m)
	}
	src := &outsideSource{pending: msgs, acked: map[any]int{}, allAck: make(chan struct{}), want: len(msgs)}
	obs := &outsideHeld{}
	in, err := relay.NewIntake(st, "in", src, relay.IntakeConfig{MaxBatch: 4, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(rctx) }()
	select {
	case <-src.allAck:
	case err := <-done:
		t.Fatalf("Run returned before every message was acknowledged: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("not every message was acknowledged within a minute: the intake is stuck")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	for r, n := range src.acked {
		if n != 1 {
			t.Errorf("message %v acknowledged %d times", r, n)
		}
	}
	s, err := st.Stats(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	if s.Active != 10 {
		t.Errorf("in holds %d messages, want the 10 good ones", s.Active)
	}
	held, err := st.Peek(ctx, "in.held", mqlite.PeekParams{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, h := range held {
		reasons[h.Properties[relay.HeaderHeldReason]]++
		if h.Properties[relay.HeaderHeldOrigin] == "" {
			t.Errorf("held record %s names no origin", h.MessageID)
		}
	}
	t.Logf("held: %d records, reasons %v; refused reported %d times; nacked %d %v", len(held), reasons, obs.refused, src.nacked, src.nackedOrigins)
	if len(held) != len(poison) {
		t.Errorf("%d held records, want %d (one per poisoned message, none for a delivery again)", len(held), len(poison))
	}
	for _, r := range []string{relay.HeldNoMessageID, relay.HeldInvalid, relay.HeldTooLarge, relay.HeldConflict} {
		if reasons[r] == 0 {
			t.Errorf("no record held for %s", r)
		}
	}
}

// Misuse of IntakeConfig.HoldQueue: an invalid name, or the queue itself
// (refused messages where the queue refuses them), stops the intake at
// once (NewIntake or Run), before any message is fetched. A queue of the
// longest name runs with the default hold queue.
func TestOutsideIntakeHoldQueueMisuse(t *testing.T) {
	ctx := context.Background()
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	long := strings.Repeat("q", mqlite.MaxQueueNameLen)
	for _, q := range []string{"in", long} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{DedupWindow: 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// start runs an intake until its first Fetch (its checks passed: nil)
	// or until Run returns (its error).
	start := func(queue string, cfg relay.IntakeConfig) error {
		fetched := make(chan struct{})
		src := &outsideSource{acked: map[any]int{}, allAck: make(chan struct{}), fetched: fetched}
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		in, err := relay.NewIntake(st, queue, src, cfg)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- in.Run(rctx) }()
		select {
		case err := <-done:
			return err
		case <-fetched:
			cancel()
			return <-done
		}
	}
	for name, hq := range map[string]string{"an invalid name": "bad name!", "the queue itself": "in"} {
		err := start("in", relay.IntakeConfig{HoldQueue: hq})
		t.Logf("%s: %v", name, err)
		if !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("HoldQueue %s: %v, want ErrInvalidArgument", name, err)
		}
	}
	// A queue of the longest name leaves no room for the default: NewIntake
	// says so, before Run; with a HoldQueue of its own it runs.
	src := &outsideSource{acked: map[any]int{}, allAck: make(chan struct{})}
	if _, err := relay.NewIntake(st, long, src, relay.IntakeConfig{}); !errors.Is(err, mqlite.ErrInvalidArgument) || !strings.Contains(err.Error(), "HoldQueue") {
		t.Errorf("a queue of the longest name with the default hold queue: %v, want ErrInvalidArgument naming HoldQueue", err)
	}
	if err := start(long, relay.IntakeConfig{HoldQueue: "long.held"}); err != nil {
		t.Errorf("a queue of the longest name with a hold queue: %v", err)
	}
}
