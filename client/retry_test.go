package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// lossy runs the broker's handler but, for the first request of each path
// suffix in lose, throws the reply away and drops the connection: the
// request took effect and the client never heard. It also answers the
// first request of each suffix in busy with a 503 without running it.
type lossy struct {
	next       http.Handler
	mu         sync.Mutex
	lose, busy map[string]int
	seen       map[string][]string // suffix → attempt bodies seen
}

func (l *lossy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	l.mu.Lock()
	var lose, busy bool
	for suffix, n := range l.lose {
		if strings.HasSuffix(r.URL.Path, suffix) {
			l.seen[suffix] = append(l.seen[suffix], string(body))
			if n > 0 {
				l.lose[suffix]--
				lose = true
			}
		}
	}
	for suffix, n := range l.busy {
		if strings.HasSuffix(r.URL.Path, suffix) && n > 0 {
			l.busy[suffix]--
			busy = true
		}
	}
	l.mu.Unlock()
	if busy {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","reason":"closed","message":"try later"}}`))
		return
	}
	if !lose {
		l.next.ServeHTTP(w, r)
		return
	}
	l.next.ServeHTTP(httptest.NewRecorder(), r) // it happens...
	conn, _, err := w.(http.Hijacker).Hijack()  // ...and the reply is lost
	if err == nil {
		_ = conn.Close()
	}
}

// TestRetriesAreSafe: replies lost on the way back (the request took
// effect) and 503s are retried by the client; the retried Receive carries
// the same attempt id and gets the same messages without burning a
// delivery, and the retried Complete and Send succeed from their receipt
// and their dedup row.
func TestRetriesAreSafe(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	_, key, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	must(t, err)
	srv, err := broker.New(broker.Config{Store: tb.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, err)
	l := &lossy{next: srv.Handler(),
		lose: map[string]int{"/receive": 1, "/complete": 1, "/messages": 1},
		busy: map[string]int{"/stats": 2},
		seen: map[string][]string{}}
	ts := httptest.NewServer(l)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		ts.Close()
	})
	c := newClient(t, ts.URL, key, tb.Clock)

	res, err := c.Send(ctx, "q", outbox.Message{Body: []byte("x"), MessageID: "once"})
	must(t, err)
	if !res.Duplicate {
		t.Errorf("the retried send should report the first one's row: %+v", res)
	}
	msgs, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 5})
	must(t, err)
	if len(msgs) != 1 || msgs[0].DeliveryCount != 1 {
		t.Fatalf("receive after a lost reply: %+v", msgs)
	}
	l.mu.Lock()
	tries := l.seen["/receive"]
	l.mu.Unlock()
	if len(tries) != 2 || tries[0] != tries[1] || !strings.Contains(tries[0], `"attempt_id"`) {
		t.Fatalf("receive tries %q: want two identical requests with an attempt id", tries)
	}
	must(t, c.Complete(ctx, msgs[0].Lock())) // first reply lost, retry replays the receipt
	st, err := c.Stats(ctx, "q")             // two 503s, then through
	must(t, err)
	if st.Total() != 0 {
		t.Fatalf("stats after complete: %+v", st)
	}
	if n := testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE state <> 'completed'`); n != 0 {
		t.Fatalf("%d messages left: the send was stored twice or the complete lost", n)
	}

	// A broker that stays away: the client gives up after MaxElapsed with
	// ErrUnavailable.
	down, err := client.New(client.Config{URL: "http://127.0.0.1:1", Key: key, MaxElapsed: 300 * time.Millisecond})
	must(t, err)
	defer down.Close()
	if _, err := down.Receive(ctx, "q", mqlite.ReceiveOptions{}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("unreachable broker: %v", err)
	}
}
