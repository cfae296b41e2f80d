package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// fallbackBound bounds each wait of TestLoopFallsBackWhenStreamsAreRefused
// for a signal: far above the few seconds Loop's retries of the stream
// take.
const fallbackBound = 30 * time.Second

// refusingStreams wraps a broker's handler: while refuse is set, every
// stream open is answered 503 too_many_long_polls, as a broker whose
// long-poll slots are all taken answers. Each open is signalled on opens
// (refused or not), and the opens let through on served.
type refusingStreams struct {
	refuse atomic.Bool
	opens  chan bool // true for an open let through
}

func (rs *refusingStreams) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/stream") {
			h.ServeHTTP(w, r)
			return
		}
		refused := rs.refuse.Load()
		select {
		case rs.opens <- !refused:
		default:
		}
		if !refused {
			h.ServeHTTP(w, r)
			return
		}
		// As the broker answers a refused stream: its lines unread, the
		// connection closes rather than read them to their end first.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(wire.ErrorResponse{Error: wire.Error{
			Code: wire.CodeUnavailable, Reason: wire.ReasonBusy, Message: "all long-poll slots are taken"}})
	})
}

// TestLoopFallsBackWhenStreamsAreRefused: while the broker refuses every
// stream open (503, its long-poll slots taken), consumer.Loop over the
// client claims with long-poll receives instead of retrying the stream
// alone, logs why once, tries the stream again later, and takes it when
// the broker lets it through.
func TestLoopFallsBackWhenStreamsAreRefused(t *testing.T) {
	t.Parallel()
	b := testdb.OpenQueue(t, "q", mqlite.QueueOptions{})
	rs := &refusingStreams{opens: make(chan bool, 16)}
	rs.refuse.Store(true)
	url, key := serveThrough(t, b, broker.Config{}, rs.wrap)
	c := newClient(t, url, key, b.Clock)

	handled := make(chan int64, 16)
	logs := &testdb.Logs{}
	lctx, cancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() {
		loopErr <- consumer.Loop(lctx, c, "q", func(_ context.Context, m mqlite.Message) error {
			handled <- m.Seq
			return nil
		}, consumer.LoopConfig{Logger: logs.Logger()})
	}()
	defer func() {
		cancel()
		if err := <-loopErr; err != nil {
			t.Errorf("loop: %v", err)
		}
	}()
	wantOpen := func(served bool, what string) {
		t.Helper()
		timer := time.NewTimer(fallbackBound)
		defer timer.Stop()
		for {
			select {
			case s := <-rs.opens:
				if s == served {
					return
				}
			case <-timer.C:
				t.Fatalf("%s: no stream open within %v", what, fallbackBound)
			}
		}
	}
	wantHandled := func(seq int64, what string) {
		t.Helper()
		select {
		case got := <-handled:
			if got != seq {
				t.Fatalf("%s: handled %d, want %d", what, got, seq)
			}
		case <-time.After(fallbackBound):
			t.Fatalf("%s: message %d not handled within %v", what, seq, fallbackBound)
		}
	}

	wantOpen(false, "the first open")
	seq := b.Send(t, "q", outbox.Message{Body: []byte("pay")})[0]
	wantHandled(seq, "while streams are refused")
	wantOpen(false, "the stream tried again")
	seq = b.Send(t, "q", outbox.Message{Body: []byte("pay")})[0]
	wantHandled(seq, "after a second refusal")
	if got := logs.Messages(); len(got) != 1 || !strings.Contains(got[0], "refused a stream") {
		t.Fatalf("warnings %q, want the refusal once", got)
	}
	rs.refuse.Store(false)
	wantOpen(true, "the stream let through")
	seq = b.Send(t, "q", outbox.Message{Body: []byte("pay")})[0]
	wantHandled(seq, "on the stream")
}
