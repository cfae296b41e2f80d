package shop

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/webhook"
)

// RelayQueue is the queue Place also sends each order.placed event to, in
// the same transaction: the relay POSTs it from there to the webhook
// receiver, while the in-process handler consumes Queue. One queue per
// consumer: the two never take a message from each other.
const RelayQueue = "orders.webhook"

// NewSecret returns a fresh Standard Webhooks secret: "whsec_" and 24
// random bytes in base64.
func NewSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b), nil
}

// Receiver is a local webhook endpoint (an httptest server on 127.0.0.1)
// that verifies each request's Standard Webhooks signature with the
// standard-webhooks library, answers 401 to a request that fails, and
// keeps the first verified body of each webhook-id: delivery is at least
// once, so a receiver drops the ids it has seen. It is safe for concurrent
// use.
type Receiver struct {
	srv *httptest.Server
	wh  *standardwebhooks.Webhook
	// failFirst makes the first verified request of each id fail with 503,
	// so that the relay retries it (with the same webhook-id).
	failFirst bool
	log       func(format string, args ...any)

	mu       sync.Mutex
	seen     map[string][]byte
	attempts map[string]int
	rejected int
	changed  chan struct{} // closed and replaced at each new id
}

// ReceiverOptions configures NewReceiver.
type ReceiverOptions struct {
	// FailFirst answers 503 to the first verified request of each id.
	FailFirst bool
	// Log, when set, gets a line per request.
	Log func(format string, args ...any)
}

// NewReceiver starts a receiver that verifies with secret. Close it.
func NewReceiver(secret string, opts ReceiverOptions) (*Receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("receiver secret: %w", err)
	}
	r := &Receiver{
		wh: wh, failFirst: opts.FailFirst, log: opts.Log,
		seen: map[string][]byte{}, attempts: map[string]int{}, changed: make(chan struct{}),
	}
	if r.log == nil {
		r.log = func(string, ...any) {}
	}
	r.srv = httptest.NewServer(r)
	return r, nil
}

// URL is the receiver's endpoint.
func (r *Receiver) URL() string { return r.srv.URL }

// Close stops the server and waits for its requests.
func (r *Receiver) Close() { r.srv.Close() }

// ServeHTTP verifies and records one request.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	id := req.Header.Get(standardwebhooks.HeaderWebhookID)
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.mu.Lock()
		r.rejected++
		r.mu.Unlock()
		r.log("  webhook %s: signature invalid (%v): 401\n", id, err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	r.attempts[id]++
	attempt := r.attempts[id]
	if r.failFirst && attempt == 1 {
		r.mu.Unlock()
		r.log("  webhook %s: signature valid, answering 503 to the first attempt\n", id)
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	_, dup := r.seen[id]
	if !dup {
		r.seen[id] = body
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	if dup {
		r.log("  webhook %s: signature valid, seen before: dropped\n", id)
	} else {
		r.log("  webhook %s (attempt %d): signature valid, %s\n", id, attempt, body)
	}
	w.WriteHeader(http.StatusNoContent)
}

// Seen returns the first verified body of each webhook-id.
func (r *Receiver) Seen() map[string][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.seen)
}

// Attempts returns how many verified requests came for each webhook-id.
func (r *Receiver) Attempts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.attempts)
}

// Rejected is how many requests failed verification.
func (r *Receiver) Rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected
}

// wait blocks until the receiver has seen n ids, ctx is done or timeout
// passes.
func (r *Receiver) wait(ctx context.Context, n int, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		got, changed := len(r.seen), r.changed
		r.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("the receiver saw %d of %d events after %s", got, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Relay runs a relay of RelayQueue on st to a webhook sink signing with
// secret and POSTing to rcv, until rcv has verified n distinct events
// (or DrainTimeout passes), then stops it and waits for it.
func Relay(ctx context.Context, st *mqlite.Store, rcv *Receiver, secret string, n int, logger *slog.Logger) error {
	sink, err := webhook.New(webhook.Config{URL: rcv.URL(), Secrets: []string{secret}, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("webhook sink: %w", err)
	}
	defer sink.Close()
	if logger == nil {
		logger = slog.Default()
	}
	rl, err := relay.New(st, RelayQueue, sink, relay.Config{
		// A refused POST comes back after 10 ms, then 20 ms, ...
		Backoff: consumer.Backoff{Initial: 10 * time.Millisecond, Jitter: -1},
		Logger:  logger,
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- rl.Run(runCtx) }()
	waitErr := rcv.wait(ctx, n, DrainTimeout)
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return errors.Join(waitErr, fmt.Errorf("relay: %w", err))
	}
	return waitErr
}
