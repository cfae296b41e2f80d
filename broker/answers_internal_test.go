package broker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// TestAnswersWaitForTheAnswerBudget: while answers that carry messages
// hold Config.MaxAnswerBytes (here, one peek whose client does not read
// it), the next such answer waits, for as long as its request lives, and
// is written once room is given back. Each answer was bounded alone: 240
// peeks that nobody read held 2 GiB.
func TestAnswersWaitForTheAnswerBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		serve := answerServer(t, Config{MaxResponseBytes: 1 << 10, MaxAnswerBytes: 1 << 10}, []byte("m"))

		release := make(chan struct{})
		stuck := &stuckWriter{lineWriter: lineWriter{header: http.Header{}}, release: release}
		first := serve(context.Background(), stuck)
		synctest.Wait() // the first answer waits for its client, holding the budget

		gone, leave := context.WithCancel(context.Background())
		w := &lineWriter{header: http.Header{}}
		second := serve(gone, w)
		synctest.Wait()
		if got := w.buf.String(); got != "" {
			t.Fatalf("a second answer was written while the first held the budget: %.200s", got)
		}
		leave() // its client goes: its wait ends
		<-second
		if strings.Contains(w.buf.String(), `"messages"`) {
			t.Fatalf("the answer of a request that ended was written: %.200s", w.buf.String())
		}

		waiting := &lineWriter{header: http.Header{}}
		third := serve(context.Background(), waiting)
		synctest.Wait()
		close(release) // the first client reads: the third answer follows
		<-first
		<-third
		if !strings.Contains(waiting.buf.String(), `"messages"`) {
			t.Fatalf("the third answer, once room was given back: %.200s", waiting.buf.String())
		}
	})
}

// answerServer serves a store holding messages of bodies in queue "q",
// with cfg, inside the current bubble; serve runs a peek of "q" under ctx,
// its answer written to w, and closes the channel it returns when done.
func answerServer(t *testing.T, cfg Config, bodies ...[]byte) (serve func(ctx context.Context, w http.ResponseWriter) chan struct{}) {
	t.Helper()
	srv := newTestServerIn(t, cfg)
	if err := srv.st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if _, err := outbox.Send(context.Background(), srv.st, "q", outbox.Message{Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	_, secret, err := keys.Create(context.Background(), srv.st, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(srv, secret)
}

// newTestServerIn is a broker with cfg on a fresh store, inside the
// current bubble.
func newTestServerIn(t *testing.T, cfg Config) *Server {
	t.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = st, slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// serveOn returns answerServer's serve for srv and the key secret.
func serveOn(srv *Server, secret string) func(ctx context.Context, w http.ResponseWriter) chan struct{} {
	return func(ctx context.Context, w http.ResponseWriter) chan struct{} {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/queues/q/messages", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Handler().ServeHTTP(w, r)
		}()
		return done
	}
}

// TestReadsThatFillTheAnswerBudgetAllAnswer: a read that holds room in a
// full Config.MaxAnswerBytes writes its answer, larger than that room,
// while another read waits for room: it exchanges its room for the
// answer's bytes without a second wait. When it gave its room back and
// waited anew, the waiting read took that room and the reads that had
// read waited for room the others held: none answered.
func TestReadsThatFillTheAnswerBudgetAllAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const room = 4 << 10
		srv := newTestServerIn(t, Config{MaxResponseBytes: room / 4 * 3, MaxAnswerBytes: 2 * room})
		ctx := context.Background()
		a, errA := srv.holdRead(ctx, reads)
		b, errB := srv.holdRead(ctx, reads)
		if errA != nil || errB != nil || a == 0 || b == 0 {
			t.Fatalf("the two reads hold %d and %d (%v, %v), want room each", a, b, errA, errB)
		}
		waiting := make(chan int)
		go func() { // a third read waits for room
			n, _ := srv.holdRead(ctx, reads)
			waiting <- n
		}()
		synctest.Wait()
		w := &lineWriter{header: http.Header{}}
		answered := make(chan struct{})
		go func() { // the first read has read: an answer larger than the room left
			defer close(answered)
			srv.writeAnswer(ctx, w, http.StatusOK, map[string]string{"m": strings.Repeat("x", 2*room)}, reads, a)
		}()
		synctest.Wait()
		select {
		case <-answered:
		default:
			t.Fatal("the first read's answer waits for room")
		}
		srv.answers.give(b)
		srv.answers.give(<-waiting)
	})
}
