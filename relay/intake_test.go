package relay_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/internal/relaytest"
)

// fakeSource delivers its messages in order, each again when it is given
// back, and checks at each Ack that the message is in the queue.
type fakeSource struct {
	t     *testing.T
	st    *mqlite.Store
	mu    sync.Mutex
	next  []relay.Inbound // to deliver, in order
	gone  int             // Fetches still to answer with Gone
	acked map[string]int
	nacks int
	tired int           // give-backs after which the source goes idle; 0: never
	idle  chan struct{} // closed once a Fetch finds nothing to deliver, or after tired give-backs
}

func newFakeSource(t *testing.T, st *mqlite.Store, msgs ...relay.Inbound) *fakeSource {
	return &fakeSource{t: t, st: st, next: msgs, acked: map[string]int{}, idle: make(chan struct{})}
}

func (s *fakeSource) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	s.mu.Lock()
	if s.tired > 0 && s.nacks >= s.tired {
		s.goIdle()
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.gone > 0 {
		s.gone--
		s.mu.Unlock()
		return nil, relay.Gone("no_stream", errors.New("stream not found"))
	}
	if len(s.next) == 0 {
		s.goIdle()
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	n := min(max, len(s.next))
	out := slices.Clone(s.next[:n])
	s.next = s.next[n:]
	s.mu.Unlock()
	return out, nil
}

func (s *fakeSource) goIdle() {
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

func (s *fakeSource) Ack(ctx context.Context, msgs []relay.Inbound) error {
	for _, m := range msgs {
		if testdb.Int(s.t, s.st.DB(), "SELECT count(*) FROM mqlite_messages WHERE message_id = ?", m.MessageID) != 1 {
			s.t.Errorf("%s acknowledged before it committed", m.MessageID)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.acked[m.MessageID]++
	}
	return nil
}

func (s *fakeSource) Nack(ctx context.Context, msgs []relay.Inbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nacks++
	s.next = append(slices.Clone(msgs), s.next...)
	return nil
}

func (s *fakeSource) Redelivery() time.Duration { return 30 * time.Second }

func inbound(ids ...string) []relay.Inbound {
	out := make([]relay.Inbound, len(ids))
	for i, id := range ids {
		out[i] = relay.Inbound{Message: outbox.Message{MessageID: id, Body: []byte("body of " + id)}}
	}
	return out
}

// runIntake runs an intake of src into relaytest.Queue until src is idle,
// and returns what it logged.
func runIntake(t *testing.T, st *mqlite.Store, src *fakeSource, cfg relay.IntakeConfig) *relaytest.Logs {
	t.Helper()
	logs := &relaytest.Logs{}
	cfg.Logger = logs.Logger()
	cfg.Backoff = consumer.Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	cfg.HoldBackoff = cfg.Backoff
	in, err := relay.NewIntake(st, relaytest.Queue, src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	select {
	case <-src.idle:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(relaytest.Timeout):
		t.Fatal("timed out waiting for the intake")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return logs
}

func bodies(t *testing.T, st *mqlite.Store) []string {
	return testdb.Strings(t, st.DB(), "SELECT message_id FROM mqlite_messages ORDER BY id")
}

// longWindow is a dedup window above the fake source's redelivery plus
// the default outage.
var longWindow = mqlite.QueueOptions{DedupWindow: 2 * time.Hour}

func TestIntakeTakesEachMessageOnceByID(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	// b and c come twice, as a source delivers again a message whose
	// acknowledgement was lost.
	src := newFakeSource(t, b.Store, inbound("a", "b", "c", "b", "d", "c")...)
	obs := &intakeSpy{}
	runIntake(t, b.Store, src, relay.IntakeConfig{MaxBatch: 2, Observer: obs})
	if got := bodies(t, b.Store); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("queue holds %v, want a b c d once each", got)
	}
	if src.acked["b"] != 2 || src.acked["a"] != 1 {
		t.Errorf("acknowledgements %v: want every delivery acknowledged after its commit", src.acked)
	}
	if obs.taken != 6 || obs.dups != 2 {
		t.Errorf("observer: %d taken, %d duplicates; want 6 and 2", obs.taken, obs.dups)
	}
}

type intakeSpy struct {
	taken, dups int
	held        []string
}

func (s *intakeSpy) Taken(_ string, _ relay.Inbound, dup bool) {
	s.taken++
	if dup {
		s.dups++
	}
}

func (s *intakeSpy) Held(_ string, reason string, _ error) { s.held = append(s.held, reason) }

// TestIntakeNeverAcknowledgesWhatDidNotCommit: a message the queue refuses
// (over the size limit, or without an id) holds the intake; the messages
// before it commit, one at a time, and are acknowledged; it is never
// acknowledged, and the hold is logged once.
func TestIntakeNeverAcknowledgesWhatDidNotCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bad  relay.Inbound
		want error
	}{
		{"too large", relay.Inbound{Message: outbox.Message{MessageID: "big", Body: make([]byte, 2<<20)}}, mqlite.ErrMessageTooLarge},
		{"no id", relay.Inbound{Message: outbox.Message{Body: []byte("x")}}, relay.ErrNoMessageID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := relaytest.Open(t, longWindow)
			msgs := append(inbound("a", "b"), tc.bad)
			msgs = append(msgs, inbound("c")...)
			src := newFakeSource(t, b.Store, msgs...)
			src.tired = 5
			obs := &intakeSpy{}
			logs := runIntake(t, b.Store, src, relay.IntakeConfig{MaxBatch: 4, Observer: obs})
			if got := bodies(t, b.Store); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("queue holds %v, want a b (those before the refused one)", got)
			}
			if len(src.acked) != 2 || src.acked["a"] != 1 || src.acked["b"] != 1 {
				t.Fatalf("acknowledged %v, want a and b once", src.acked)
			}
			errs := 0
			for _, l := range logs.Messages() {
				if strings.Contains(l, "intake: holding") {
					errs++
				}
			}
			if errs != 1 {
				t.Errorf("the hold logged %d times, want once: %q", errs, logs.Messages())
			}
			if len(obs.held) == 0 || obs.held[0] != "refused" {
				t.Errorf("holds observed: %v", obs.held)
			}
		})
	}
}

func TestIntakeHoldsAGoneSource(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	src := newFakeSource(t, b.Store, inbound("a")...)
	src.gone = 3
	obs := &intakeSpy{}
	logs := runIntake(t, b.Store, src, relay.IntakeConfig{Observer: obs})
	if got := bodies(t, b.Store); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("queue holds %v, want a", got)
	}
	if !slices.Equal(obs.held, []string{"no_stream", "no_stream", "no_stream"}) {
		t.Errorf("holds observed: %v", obs.held)
	}
	if msgs := logs.Messages(); len(msgs) != 1 || !strings.Contains(msgs[0], "intake: holding") {
		t.Errorf("logs (WARN and above): %q, want the hold once", msgs)
	}
}

func TestIntakeRefusesAShortDedupWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		window time.Duration
		outage time.Duration
		ok     bool
	}{
		{"default window, default outage", 0, 0, false},
		{"window off", -1, -1, false},
		{"window equal to the horizon", 30 * time.Second, -1, false},
		{"window above redelivery, no outage", time.Minute, -1, true},
		{"window above redelivery plus outage", 2 * time.Hour, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := relaytest.Open(t, mqlite.QueueOptions{DedupWindow: tc.window})
			src := newFakeSource(t, b.Store)
			in, err := relay.NewIntake(b.Store, relaytest.Queue, src, relay.IntakeConfig{Outage: tc.outage})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- in.Run(ctx) }()
			if tc.ok {
				<-src.idle
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				return
			}
			defer cancel()
			err = <-done
			if !errors.Is(err, relay.ErrWindowTooShort) || !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("Run: %v, want ErrWindowTooShort", err)
			}
			if !strings.Contains(err.Error(), "--dedup-window") {
				t.Errorf("the error names no fix: %v", err)
			}
		})
	}
}

func TestNewIntakeValidates(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	src := newFakeSource(t, b.Store)
	for _, tc := range []struct {
		name  string
		st    *mqlite.Store
		queue string
		src   relay.Source
		cfg   relay.IntakeConfig
	}{
		{"nil store", nil, relaytest.Queue, src, relay.IntakeConfig{}},
		{"nil source", b.Store, relaytest.Queue, nil, relay.IntakeConfig{}},
		{"no queue", b.Store, "", src, relay.IntakeConfig{}},
		{"batch too large", b.Store, relaytest.Queue, src, relay.IntakeConfig{MaxBatch: mqlite.MaxReceiveBatch + 1}},
		{"negative outage", b.Store, relaytest.Queue, src, relay.IntakeConfig{Outage: -2}},
	} {
		if _, err := relay.NewIntake(tc.st, tc.queue, tc.src, tc.cfg); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestIntakeStopsWhenTheQueueIsMissing(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	in, err := relay.NewIntake(b.Store, "nope", newFakeSource(t, b.Store), relay.IntakeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Run(context.Background()); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("Run: %v, want ErrQueueNotFound", err)
	}
}
