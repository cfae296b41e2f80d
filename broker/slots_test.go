package broker_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// openedStream is a stream opened over HTTP: the client's end of its
// lines, and its answer read line by line.
type openedStream struct {
	status int
	lines  *io.PipeWriter
	events *bufio.Scanner
}

// openStream opens a stream of queue with window under key; the test's
// cleanup ends it.
func (f *fixture) openStream(t *testing.T, queue, key string, window int) *openedStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/queues/"+queue+"/stream?window="+strconv.Itoa(window), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pw.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	})
	return &openedStream{status: resp.StatusCode, lines: pw, events: bufio.NewScanner(resp.Body)}
}

// next reads the stream's next event.
func (s *openedStream) next(t *testing.T) wire.StreamEvent {
	t.Helper()
	if !s.events.Scan() {
		t.Fatalf("the stream ended: %v", s.events.Err())
	}
	var ev wire.StreamEvent
	if err := json.Unmarshal(s.events.Bytes(), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestOneKeyCannotTakeEveryLongPoll: one key's streams and long-polls take
// at most its share of Config.MaxLongPolls, and a stream that waits for its
// client's lines (its window full) holds none, so the other keys still
// long-poll and stream. Streams used to hold a place for as long as they
// stayed open: one key's idle streams refused every other key's waits.
func TestOneKeyCannotTakeEveryLongPoll(t *testing.T) {
	const places = 4
	f := start(t, broker.Config{MaxLongPolls: places}) // a key's share: one
	f.tb.Queue(t, "empty", mqlite.QueueOptions{})
	hog, _ := f.key(t, keys.Consumer, "*")
	msgs := make([]outbox.Message, 2*places)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: []byte("m")}
	}
	if _, err := outbox.Send(ctx, f.tb.Store, "q", msgs...); err != nil {
		t.Fatal(err)
	}

	// Twice as many idle streams as there are places: each fills its
	// window and then waits for its client, holding no place.
	for i := range msgs {
		s := f.openStream(t, "q", hog, 1)
		if s.status != http.StatusOK {
			t.Fatalf("idle stream %d: status %d, want 200", i, s.status)
		}
		if ev := s.next(t); len(ev.Messages) != 1 {
			t.Fatalf("idle stream %d: first event %+v, want one message", i, ev)
		}
	}
	// One stream that waits for a message holds the key's one place.
	if s := f.openStream(t, "empty", hog, 1); s.status != http.StatusOK {
		t.Fatalf("waiting stream: status %d, want 200", s.status)
	}
	tests := []struct {
		name, key string
		want      int
	}{
		{"the hog's next stream", hog, http.StatusServiceUnavailable},
		{"another key's stream", f.keys["consumer"], http.StatusOK},
	}
	for _, tc := range tests {
		if s := f.openStream(t, "empty", tc.key, 1); s.status != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, s.status, tc.want)
		}
	}
	for _, tc := range []struct {
		name, key string
		want      int
	}{
		{"the hog's long-poll", hog, http.StatusServiceUnavailable},
		{"another key's long-poll", f.keys["admin"], http.StatusOK},
	} {
		if st, eb := f.do(t, "POST", "/v1/queues/empty/receive", tc.key, []byte(`{"wait_ms":1}`)); st != tc.want {
			t.Errorf("%s: status %d (%+v), want %d", tc.name, st, eb, tc.want)
		}
	}
}
