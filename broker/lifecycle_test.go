package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	st := testdb.Open(t, mqlite.Config{}).Store
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		ok   bool
	}{
		{"defaults", broker.Config{Store: st}, true},
		{"no store", broker.Config{}, false},
		{"negative body", broker.Config{Store: st, MaxBodyBytes: -1}, false},
		{"negative timeout", broker.Config{Store: st, ReadTimeout: -1}, false},
		{"write timeout under max wait", broker.Config{Store: st, MaxWait: time.Minute, WriteTimeout: time.Second}, false},
		{"cache off", broker.Config{Store: st, KeyCacheTTL: -1}, true},
		{"backup folder", broker.Config{Store: st, BackupDir: t.TempDir()}, true},
		{"backup folder missing", broker.Config{Store: st, BackupDir: filepath.Join(t.TempDir(), "nope")}, false},
		{"negative response budget", broker.Config{Store: st, MaxResponseBytes: -2}, false},
		{"response budget off", broker.Config{Store: st, MaxResponseBytes: -1}, true},
		{"negative cache ttl", broker.Config{Store: st, KeyCacheTTL: -2}, false},
		{"negative batch", broker.Config{Store: st, MaxBatch: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := broker.New(tc.cfg)
			// Every bad Config is both the broker's and the family's.
			if (err == nil) != tc.ok || (err != nil && (!errors.Is(err, broker.ErrInvalidConfig) || !errors.Is(err, mqlite.ErrInvalidArgument))) {
				t.Fatalf("New: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func post(t *testing.T, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// TestShutdownEndsLongPollsAndClosesTheStore: a waiting receive answers
// with no messages when the broker shuts down, /readyz turns 503, and the
// store is closed afterwards.
func TestShutdownEndsLongPollsAndClosesTheStore(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	_, key, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.New(broker.Config{Store: tb.Store, MaxLongPolls: 1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	polled := make(chan []byte, 1)
	longPoll := func() {
		go func() {
			_, data := post(t, ts.URL+"/v1/queues/q/receive", key, `{"wait_ms":3600000}`)
			polled <- data
		}()
	}
	longPoll()
	// Once the long-poll holds the one slot, a second waiting receive is
	// refused (retry later) rather than queued. A probe may itself take the
	// slot for its 10ms and make the long-poll the refused one: start it again.
	for {
		resp, data := post(t, ts.URL+"/v1/queues/q/receive", key, `{"wait_ms":10}`)
		if resp.StatusCode == 503 {
			if !strings.Contains(string(data), wire.ReasonBusy) || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("busy: %s", data)
			}
			break
		}
		select {
		case <-polled:
			longPoll()
		default:
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	var got wire.MessagesResponse
	if err := json.Unmarshal(<-polled, &got); err != nil || got.Messages == nil || len(got.Messages) != 0 {
		t.Fatalf("the long-poll answered %+v, %v; want no messages", got, err)
	}
	resp, err := http.Get(ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz after shutdown: %d", resp.StatusCode)
	}
	if _, err := tb.Store.Peek(ctx, "q", mqlite.PeekParams{}); !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("store after shutdown: %v, want ErrClosed", err)
	}
}

// TestServeStopsOnCancel: Serve returns nil once its ctx is cancelled, after
// draining, and the store is closed.
func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	srv, err := broker.New(broker.Config{Store: tb.Store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := tb.Store.Tx(ctx, func(*mqlite.Tx) error { return nil }); !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("store after Serve: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestConfigValidate: Validate finds what New refuses in the settings
// without a Store, and New still refuses a Config without one.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (broker.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config (defaults): %v", err)
	}
	for _, bad := range []broker.Config{{MaxLongPolls: -5}, {MaxAnswerBytes: -7}, {MaxBodyBytes: -1}, {BackupDir: "/nonexistent/dir"}} {
		if err := bad.Validate(); !errors.Is(err, broker.ErrInvalidConfig) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if _, err := broker.New(broker.Config{}); !errors.Is(err, broker.ErrInvalidConfig) {
		t.Errorf("New without a Store = %v, want ErrInvalidConfig", err)
	}
}
