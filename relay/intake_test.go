package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
		// In the queue by its id, or held aside with its body.
		if testdb.Int(s.t, s.st.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = ? AND message_id = ? AND body = ?
			OR queue = ? AND (body = ? OR json_extract(properties, '$."mqlite-held-body-bytes"') = ?)`,
			relaytest.Queue, m.MessageID, m.Body, holdQueue, m.Body, strconv.Itoa(len(m.Body))) == 0 {
			s.t.Errorf("%q acknowledged before it committed", m.MessageID)
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
	return testdb.Strings(t, st.DB(), "SELECT message_id FROM mqlite_messages WHERE queue = ? ORDER BY id", relaytest.Queue)
}

// holdQueue is the default hold queue of an intake into relaytest.Queue.
const holdQueue = relaytest.Queue + ".held"

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

// TestIntakeHoldsAsideWhatTheQueueRefuses: five messages the queue refuses
// (an id too long, an id not UTF-8, a header not UTF-8, properties over
// the limit, no id), and one too large for the store, among good ones,
// with a delivery again of one of them: every good one is taken, in order;
// each refused one is held aside in the hold queue once, with its body and
// why, said in the log and to the observer, and acknowledged; the intake
// never stalls (the source is drained).
func TestIntakeHoldsAsideWhatTheQueueRefuses(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	bigProps := map[string]string{}
	for i := range 70 {
		bigProps[fmt.Sprintf("h%02d", i)] = strings.Repeat("v", 1<<10)
	}
	poison := []relay.Inbound{
		{Message: outbox.Message{MessageID: strings.Repeat("x", mqlite.MaxMessageIDLen+1), Body: []byte("long id")}, Origin: "seq 2"},
		{Message: outbox.Message{MessageID: "bad\xff", Body: []byte("bad id")}},
		{Message: outbox.Message{MessageID: "p3", Body: []byte("bad header"), Properties: map[string]string{"k": "\xfe", "ok": "kept"}}},
		{Message: outbox.Message{MessageID: "p4", Body: []byte("big headers"), Properties: bigProps}},
		{Message: outbox.Message{Body: []byte("no id")}, Origin: "queue q delivery tag 9"},
		{Message: outbox.Message{MessageID: "p6", Body: make([]byte, 2<<20)}},
	}
	var msgs []relay.Inbound
	var good []string
	for i, p := range poison {
		id := fmt.Sprintf("g%d", i)
		good = append(good, id)
		msgs = append(msgs, inbound(id)[0], p)
	}
	msgs = append(msgs, poison[1], inbound("last")[0]) // a delivery again of a held one
	good = append(good, "last")
	src := newFakeSource(t, b.Store, msgs...)
	obs := &intakeSpy{}
	logs := runIntake(t, b.Store, src, relay.IntakeConfig{MaxBatch: 4, Observer: obs})
	if got := bodies(t, b.Store); !slices.Equal(got, good) {
		t.Fatalf("queue holds %v, want %v", got, good)
	}
	held, err := b.Store.Peek(context.Background(), holdQueue, mqlite.PeekParams{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(poison) {
		t.Fatalf("hold queue holds %d records, want %d", len(held), len(poison))
	}
	want := []string{relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldInvalid, relay.HeldNoMessageID, relay.HeldTooLarge}
	for i, h := range held {
		p := poison[i]
		if r := h.Properties[relay.HeaderHeldReason]; r != want[i] {
			t.Errorf("held %d: reason %q, want %q", i, r, want[i])
		}
		if want[i] == relay.HeldTooLarge {
			if len(h.Body) != 0 || h.Properties[relay.HeaderHeldBodyBytes] != strconv.Itoa(len(p.Body)) {
				t.Errorf("held %d: %d bytes of body, size %q", i, len(h.Body), h.Properties[relay.HeaderHeldBodyBytes])
			}
		} else if string(h.Body) != string(p.Body) {
			t.Errorf("held %d: body %q, want %q", i, h.Body, p.Body)
		}
		if h.Properties[relay.HeaderHeldOrigin] != p.Origin {
			t.Errorf("held %d: origin %q, want %q", i, h.Properties[relay.HeaderHeldOrigin], p.Origin)
		}
	}
	if held[2].Properties["ok"] != "kept" || held[2].Properties[relay.HeaderHeldDropped] != "1" {
		t.Errorf("held header record: %v, want the valid header kept, one dropped", held[2].Properties)
	}
	if held[0].Properties[relay.HeaderHeldID] != strconv.Quote(poison[0].MessageID)[:mqlite.MaxMessageIDLen] {
		t.Errorf("held long id: %q", held[0].Properties[relay.HeaderHeldID])
	}
	for _, m := range msgs {
		if src.acked[m.MessageID] == 0 {
			t.Errorf("%.20q not acknowledged", m.MessageID)
		}
	}
	if n := strings.Count(strings.Join(obs.held, " "), "refused"); n != len(poison)+1 {
		t.Errorf("holds observed: %v, want %d refused", obs.held, len(poison)+1)
	}
	n := 0
	for _, l := range logs.Messages() {
		if strings.Contains(l, "held aside") {
			n++
		}
	}
	if n != len(poison)+1 {
		t.Errorf("%d log lines say a message was held aside, want %d: %q", n, len(poison)+1, logs.Messages())
	}
}

// TestIntakeKeepsAConflictingMessage: a message whose id is another
// message's in the dedup window (ErrDuplicateConflict in its slot of the
// batch) is not acknowledged without a trace: it is held aside with its
// body, while the batch's others commit.
func TestIntakeKeepsAConflictingMessage(t *testing.T) {
	t.Parallel()
	b := relaytest.Open(t, longWindow)
	relaytest.Send(t, b.Store, outbox.Message{MessageID: "x", Body: []byte("first body of x")})
	msgs := inbound("a", "x", "b")
	src := newFakeSource(t, b.Store, msgs...)
	runIntake(t, b.Store, src, relay.IntakeConfig{MaxBatch: 10})
	if got := bodies(t, b.Store); !slices.Equal(got, []string{"x", "a", "b"}) {
		t.Fatalf("queue holds %v, want x a b", got)
	}
	held, err := b.Store.Peek(context.Background(), holdQueue, mqlite.PeekParams{})
	if err != nil || len(held) != 1 || string(held[0].Body) != "body of x" ||
		held[0].Properties[relay.HeaderHeldReason] != relay.HeldConflict || held[0].Properties[relay.HeaderHeldID] != "x" {
		t.Fatalf("hold queue: %+v, %v; want the conflicting x held aside", held, err)
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
