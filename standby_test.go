package mqlite_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// signalHandler is a slog.Handler that closes waiting on the first record
// whose message contains "waiting": the moment a WaitForLock Open found the
// file held and began to wait. Tests wait on it instead of sleeping.
type signalHandler struct{ waiting chan struct{} }

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalHandler) WithGroup(string) slog.Handler            { return h }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "waiting") {
		select {
		case <-h.waiting:
		default:
			close(h.waiting)
		}
	}
	return nil
}

type openResult struct {
	st  *mqlite.Store
	err error
}

// openStandby starts Open with WaitForLock on path in a goroutine and
// returns once that Open waits for the lock.
func openStandby(t *testing.T, ctx context.Context, path string) <-chan openResult {
	t.Helper()
	h := signalHandler{waiting: make(chan struct{})}
	res := make(chan openResult, 1)
	go func() {
		st, err := mqlite.Open(ctx, path, mqlite.Config{WaitForLock: true, Logger: slog.New(h)})
		res <- openResult{st, err}
	}()
	select {
	case <-h.waiting:
	case r := <-res:
		if r.st != nil {
			_ = r.st.Close()
		}
		t.Fatalf("Open with WaitForLock returned while the file was held: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Open with WaitForLock never began to wait")
	}
	return res
}

// TestOpenWaitForLockTakesOver: a WaitForLock Open waits while another
// store holds the file and returns once that store closes, with the crash
// recovery done (the lease the first store left is released) and the data
// there.
func TestOpenWaitForLockTakesOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "standby.db")
	primary, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.CreateQueue(ctx, "q", mqlite.QueueOptions{LockDuration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Send(ctx, primary, "q", outbox.Message{Body: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	if msgs, err := primary.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil || len(msgs) != 1 {
		t.Fatalf("primary receive: %d messages, %v", len(msgs), err)
	}

	res := openStandby(t, ctx, path)
	select {
	case r := <-res:
		t.Fatalf("standby opened while the primary holds the file: %v", r.err)
	default:
	}
	if err := primary.Close(); err != nil {
		t.Fatal(err)
	}
	var r openResult
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("standby did not take over within 10s of the primary's Close")
	}
	if r.err != nil {
		t.Fatalf("standby Open: %v", r.err)
	}
	defer r.st.Close()
	// The primary's lease (an hour long) was released by the recovery.
	msgs, err := r.st.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "kept" || msgs[0].DeliveryCount != 2 {
		t.Fatalf("standby receive: %+v, %v; want the message again, second delivery", msgs, err)
	}
}

// TestOpenWaitForLockCtx: ending Open's ctx ends the wait with ctx's error,
// and leaves the holder undisturbed.
func TestOpenWaitForLockCtx(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		end  func(cancel context.CancelFunc) // ends the wait, or nil for a deadline
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			func(cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, nil, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "standby.db")
			primary, err := mqlite.Open(context.Background(), path, mqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer primary.Close()
			ctx, cancel := tc.ctx()
			defer cancel()
			res := openStandby(t, ctx, path)
			if tc.end != nil {
				tc.end(cancel)
			}
			var r openResult
			select {
			case r = <-res:
			case <-time.After(10 * time.Second):
				t.Fatal("Open did not return after its ctx ended")
			}
			if r.st != nil {
				_ = r.st.Close()
			}
			if !errors.Is(r.err, tc.want) {
				t.Fatalf("Open: %v, want %v", r.err, tc.want)
			}
			if err := primary.CreateQueue(context.Background(), "still-works", mqlite.QueueOptions{}); err != nil {
				t.Fatalf("primary after the standby gave up: %v", err)
			}
		})
	}
}
