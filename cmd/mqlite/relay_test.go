package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// syncBuffer is a bytes.Buffer safe for the relay's and the test's
// goroutines, that a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced by every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

// waitFor blocks until the buffer holds sub, failing the test after a
// minute.
func (s *syncBuffer) waitFor(t *testing.T, sub string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), sub) {
			s.mu.Unlock()
			return
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no %q in %s", sub, s.String())
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRelayCommandForwardsAndLogsDeadLetters(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/app.db"
	ctx := context.Background()
	st, err := mqlite.Open(ctx, path, mqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, b := range []string{"one", "two", "refused"} {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "events", outbox.Message{Body: []byte(b)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil { // the relay opens the file itself
		t.Fatal(err)
	}

	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		if b.String() == "refused" {
			http.Error(w, "no such order", http.StatusUnprocessableEntity)
		}
		got <- b.String()
	}))
	defer srv.Close()

	rctx, cancel := context.WithCancel(ctx)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "--db", path, "--url", "", "--queue", "events", "--sink", "webhook",
			"--webhook-url", srv.URL, "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, strings.NewReader(""), &stdout, &stderr)
	}()
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case b := <-got:
			seen[b] = true
		case <-time.After(time.Minute):
			t.Fatalf("timed out; got %v; stderr %s", seen, stderr.String())
		}
	}
	// The dead letter is logged once Reject has committed.
	stderr.waitFor(t, "relay: dead-lettered")
	cancel() // as SIGINT would
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, stderr.String())
	}
	if s := stderr.String(); !strings.Contains(s, "HTTP 422") || !strings.Contains(s, "relay: stopped") {
		t.Fatalf("stderr %s", s)
	}
}

func TestRelayCommandUsage(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no db":          {"relay", "--db", "", "--url", "", "--queue", "q", "--sink", "nats"},
		"no queue":       {"relay", "--db", "x.db", "--sink", "nats"},
		"unknown sink":   {"relay", "--db", "x.db", "--queue", "q", "--sink", "kafka"},
		"webhook no url": {"relay", "--db", "x.db", "--queue", "q", "--sink", "webhook", "--secret", "whsec_x"},
		"amqp no url":    {"relay", "--db", "x.db", "--queue", "q", "--sink", "amqp"},
		"single dash":    {"relay", "-db", "x.db", "--queue", "q", "--sink", "nats"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit code %d, want 2; stderr %s", name, code, stderr.String())
		}
	}
}
