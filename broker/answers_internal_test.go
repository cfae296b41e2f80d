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
		st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
			ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.Send(context.Background(), st, "q", outbox.Message{Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
		_, secret, err := keys.Create(context.Background(), st, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(Config{Store: st, MaxResponseBytes: 1 << 10, MaxAnswerBytes: 1 << 10,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		serve := func(ctx context.Context, w http.ResponseWriter) chan struct{} {
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/queues/q/messages", nil)
			r.Header.Set("Authorization", "Bearer "+secret)
			done := make(chan struct{})
			go func() {
				defer close(done)
				srv.Handler().ServeHTTP(w, r)
			}()
			return done
		}

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
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
