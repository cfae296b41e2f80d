package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestSendValidatesBeforeSending : Send and SendBatch
// refuse what outbox.SendOne refuses (invalid UTF-8, fields over their
// bounds) with the same sentinel, before any request leaves the process.
func TestSendValidatesBeforeSending(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer ts.Close()
	c := newClient(t, ts.URL, "k", nil)
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	for _, m := range []outbox.Message{
		{MessageID: "a\xff"},
		{GroupID: "g\xfe"},
		{Subject: "\xed\xa0\x80"},
		{Properties: map[string]string{"k\xc3": "v"}},
		{Properties: map[string]string{"k": "v\xff"}},
		{MessageID: strings.Repeat("m", mqlite.MaxMessageIDLen+1)},
		{TTL: -time.Second},
	} {
		if _, err := c.Send(ctx, "q", m); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("Send(%+v): %v, want ErrInvalidArgument", m, err)
		}
		if _, err := c.SendBatch(ctx, "q", []outbox.Message{{}, m}); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("SendBatch(%+v): %v, want ErrInvalidArgument", m, err)
		}
		// The store says the same.
		_, err := outbox.Send(ctx, b.Store, "q", m)
		if _, errc := c.Send(ctx, "q", m); !sameSentinels(err, errc) {
			t.Errorf("outbox.SendOne(%+v): %v, the client: %v", m, err, errc)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the broker", n)
	}
}

// sameSentinels reports whether a and b match the same invalid-argument
// sentinels.
func sameSentinels(a, b error) bool {
	for _, s := range []error{mqlite.ErrInvalidArgument, mqlite.ErrInvalidMessage, mqlite.ErrInvalidTTL} {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return true
}

// TestFewerThanAskedWithinTheBudget : over a broker with
// a small byte budget, Receive, Peek and Find return fewer messages than asked
// and consumer.Loop over the client still handles every message once.
func TestFewerThanAskedWithinTheBudget(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: lease})
	url, key := serve(t, b, broker.Config{MaxResponseBytes: 3000})
	c := newClient(t, url, key, b.Clock)
	const n = 40
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "%01000d", i)}
	}
	if _, err := c.SendBatch(ctx, "q", msgs); err != nil {
		t.Fatal(err)
	}
	peeked, err := c.Peek(ctx, "q", mqlite.PeekParams{Max: 100})
	if err != nil || len(peeked) != 3 {
		t.Fatalf("peek of 100: %d messages, %v; want 3 (the budget)", len(peeked), err)
	}
	// A MaxBytes above the broker's budget is capped to it, as the docs say.
	found, err := c.Find(ctx, "q", mqlite.FindParams{Max: 100, MaxBytes: 1 << 20})
	if err != nil || len(found.Messages) != 3 || found.NextSeq != found.Messages[2].Seq+1 {
		t.Fatalf("find of 100 within 1 MiB: %d messages, %v; want 3 (the budget)", len(found.Messages), err)
	}
	for i := range 5 {
		err := c.CreateSchedule(ctx, fmt.Sprint("s", i), mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Body: make([]byte, 1000)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var pages []int
	for opts := (mqlite.ListSchedulesParams{}); ; {
		ss, err := c.ListSchedules(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) == 0 {
			break
		}
		pages = append(pages, len(ss))
		opts.After = ss[len(ss)-1].Name
	}
	if !slices.Equal(pages, []int{3, 2}) {
		t.Fatalf("ListSchedules pages of %v schedules, want 3, 2 (the budget)", pages)
	}
	got, err := c.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(got) != 3 {
		t.Fatalf("receive of 10: %d messages, %v; want 3 (the budget)", len(got), err)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- consumer.Loop(lctx, c, "q", func(_ context.Context, m mqlite.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen[m.Seq]++
			if len(seen) == n-len(got) {
				cancel()
			}
			return nil
		}, consumer.LoopConfig{Concurrency: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Loop: %v", err)
	}
	for seq, k := range seen {
		if k != 1 {
			t.Errorf("seq %d handled %d times", seq, k)
		}
	}
	if len(seen) != n-len(got) {
		t.Fatalf("Loop handled %d messages, want %d", len(seen), n-len(got))
	}
}
