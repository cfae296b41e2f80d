// Package client is the Go SDK of the mqlite broker (package broker, `mqlite
// serve`): the same calls as the embedded *mqlite.Store, over HTTP.
//
// A *Client satisfies consumer.Store (batched completions, a clock and
// all) and consumer.Streamer, so consumer.Loop and the relay run unchanged
// over the network:
//
//	c, err := client.New(client.Config{URL: "http://127.0.0.1:7420", Key: os.Getenv("MQLITE_KEY")})
//	defer c.Close()
//	err = consumer.Loop(ctx, c, "orders", handle, consumer.LoopConfig{Concurrency: 8})
//
// # Retries
//
// Transient failures (connection refused or reset, timeouts, 502, 503, 504)
// are retried with exponential backoff (github.com/cenkalti/backoff/v4)
// until Config.MaxElapsed. This is safe: a settlement carries the
// delivery's token and the store keeps a receipt of each one, so a retried
// Complete whose first try succeeded succeeds again without a second
// effect; and every Receive carries an AttemptID (one is generated per call
// when the caller gives none, and reused by its retries), so a retried
// Receive whose reply was lost gets the same messages back and no delivery
// is burnt. A send is de-duplicated by its MessageID (or its body) within
// the queue's DedupWindow; on a queue with de-duplication off a retried
// send whose first reply was lost can be stored twice (at-least-once).
//
// # Errors
//
// Errors the broker returns match the root package's sentinels with
// errors.Is (mqlite.ErrLockLost, mqlite.ErrQueueNotFound, ...), an invalid
// argument is an *mqlite.InvalidArgumentError, and every such error is also
// an *Error with the HTTP status, code and reason. The broker's own refusals
// match ErrUnauthorized, ErrForbidden, ErrRequestTooLarge, ErrMalformed and
// ErrUnavailable.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/wire"
)

// Compile-time checks: the client is a consumer Store, and a Releaser
// (Loop gives its unstarted messages back uncounted).
var (
	_ consumer.Store    = (*Client)(nil)
	_ consumer.Releaser = (*Client)(nil)
)

// Defaults of Config's zero-valued fields.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultMaxElapsed      = 30 * time.Second
	DefaultInitialInterval = 50 * time.Millisecond
	DefaultMaxInterval     = 2 * time.Second
)

// Errors of the broker's own refusals. Match them with errors.Is.
var (
	// ErrUnauthorized: no key, or an unknown or revoked one (401).
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrForbidden: the key's role or queues do not cover the request (403).
	ErrForbidden = errors.New("client: forbidden")
	// ErrRequestTooLarge: the request body or batch is over the broker's
	// limits (413). A message over the store's limit is
	// mqlite.ErrMessageTooLarge instead.
	ErrRequestTooLarge = errors.New("client: request too large")
	// ErrMalformed: the broker could not read the request (400).
	ErrMalformed = errors.New("client: malformed request")
	// ErrUnavailable: the broker is unreachable, shutting down or busy, and
	// stayed so for Config.MaxElapsed.
	ErrUnavailable = errors.New("client: broker unavailable")
	// ErrOutcomeUnknown: a Commit whose request may have committed on the
	// broker without its answer coming back, retried under its
	// idempotency key until ctx ended or Config.MaxElapsed passed with no
	// definite answer. It wraps the last try's error (ErrUnavailable,
	// ctx's error, or mqlite.ErrLockLost from a try that found the
	// deliveries settled, maybe by the one whose answer was lost).
	// Committing the same Batch again (or, for consumer.CompleteWith, the
	// same lock with the same step) is safe: it replays the answer of the
	// commit that went through, or commits now, never twice.
	ErrOutcomeUnknown = errors.New("client: commit outcome unknown")
	// ErrInvalidConfig matches every error of New about its Config, as does
	// mqlite.ErrInvalidArgument (errors.As gives an
	// *mqlite.InvalidArgumentError whose Kind is ErrInvalidConfig).
	ErrInvalidConfig = errors.New("client: invalid config")
)

// Config configures New. Zero values mean the defaults.
type Config struct {
	// URL is the broker's base URL, such as "http://127.0.0.1:7420" or
	// "https://queue.internal:7420". Required.
	URL string
	// Key is the access key, sent as "Authorization: Bearer <Key>".
	Key string
	// HTTPClient sends the requests. Defaults to a client with its own
	// transport (keep-alive, up to 256 idle connections to the broker) and
	// no overall timeout: Timeout bounds each try instead.
	HTTPClient *http.Client
	// Timeout bounds one try of one request, on top of a receive's wait.
	// Defaults to 30s.
	Timeout time.Duration
	// MaxElapsed is how long a request keeps being retried after transient
	// failures. Defaults to 30s; -1 never retries.
	MaxElapsed time.Duration
	// InitialInterval and MaxInterval shape the exponential backoff between
	// tries. Default to 50ms and 2s.
	InitialInterval, MaxInterval time.Duration
	// RetryNotifyFunc, when set, is called before each retry of a request
	// with the error of the try that failed and the wait before the next
	// one (the CLI prints one "retrying" line per call). It must not block.
	RetryNotifyFunc func(err error, wait time.Duration)
	// Clock is what Clock returns, the clock Loop measures leases by.
	// The broker's leases run on its store's clock; a client can only
	// assume the wall clock. Defaults to mqlite.SystemClock.
	Clock mqlite.Clock
}

// Client talks to one broker. It is safe for concurrent use; Close it when
// done.
type Client struct {
	cfg     Config
	name    string // this instance's wire.ClientHeader
	base    string
	http    *http.Client
	ownHTTP bool
}

// configErr returns the error of a bad Config: ErrInvalidConfig and
// mqlite.ErrInvalidArgument, the detail formatted as by fmt.Sprintf.
func configErr(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}

// New returns a client for cfg. It does not connect.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, configErr("URL %q is not an http(s) URL", cfg.URL)
	}
	for _, d := range []struct {
		p    *time.Duration
		def  time.Duration
		name string
	}{{&cfg.Timeout, DefaultTimeout, "Timeout"}, {&cfg.InitialInterval, DefaultInitialInterval, "InitialInterval"},
		{&cfg.MaxInterval, DefaultMaxInterval, "MaxInterval"}} {
		if *d.p, err = setting.Default(d.name, *d.p, d.def); err != nil {
			return nil, configErr("%v", err)
		}
	}
	// -1 stays -1: no retries.
	if cfg.MaxElapsed, err = setting.DefaultOrOff("MaxElapsed", cfg.MaxElapsed, DefaultMaxElapsed, -1); err != nil {
		return nil, configErr("%v", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = mqlite.SystemClock{}
	}
	c := &Client{cfg: cfg, name: rand.Text()[:16], base: strings.TrimRight(cfg.URL, "/"), http: cfg.HTTPClient}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		c.http = &http.Client{Transport: t}
		c.ownHTTP = true
	}
	return c, nil
}

// Close closes the idle connections of the client's own transport.
// Requests in flight are not interrupted.
func (c *Client) Close() error {
	if c.ownHTTP {
		c.http.CloseIdleConnections()
	}
	return nil
}

// Clock returns Config.Clock (the wall clock by default): see Config.Clock.
func (c *Client) Clock() mqlite.Clock { return c.cfg.Clock }

// TracerProvider returns the global provider (otel.GetTracerProvider, read
// at each call): consumer.Loop and the relay over the client record their
// spans there.
func (c *Client) TracerProvider() trace.TracerProvider { return otel.GetTracerProvider() }

// Error is an error response of the broker. It matches the root sentinel of
// its reason and the client sentinel of its code with errors.Is.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code and Reason are the broker's stable code and reason; Message is
	// for people.
	Code, Reason, Message string
	err                   error
}

// Error returns the broker's message with the status and the reason.
func (e *Error) Error() string {
	return fmt.Sprintf("mqlite broker: %d %s: %s", e.Status, e.Reason, e.Message)
}

// Unwrap returns the root sentinel error (an *mqlite.InvalidArgumentError
// for an invalid argument) and the client sentinel of the code.
func (e *Error) Unwrap() []error {
	out := []error{e.err}
	switch {
	case e.Code == wire.CodeUnauthorized:
		out = append(out, ErrUnauthorized)
	case e.Code == wire.CodeForbidden:
		out = append(out, ErrForbidden)
	case e.Reason == wire.ReasonBodyTooLarge || e.Reason == wire.ReasonBatchTooLarge:
		out = append(out, ErrRequestTooLarge)
	case e.Reason == wire.ReasonMalformed:
		out = append(out, ErrMalformed)
	case e.Code == wire.CodeUnavailable:
		out = append(out, ErrUnavailable)
	}
	return out
}

func errorFrom(status int, body []byte) *Error {
	var er wire.ErrorResponse
	if err := json.Unmarshal(body, &er); err != nil || er.Error.Code == "" {
		er.Error = wire.Error{Code: wire.CodeInternal, Reason: wire.ReasonInternal,
			Message: fmt.Sprintf("%s: %.200s", http.StatusText(status), body)}
		if status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
			er.Error.Code = wire.CodeUnavailable
		}
	}
	return &Error{Status: status, Code: er.Error.Code, Reason: er.Error.Reason, Message: er.Error.Message, err: er.Error.Err()}
}

// transient reports whether a response status is worth a retry.
func transient(status int) bool {
	switch status {
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// call is one request: its method, path, body, the value to decode the
// response into, and the extra time a long-poll may take.
type call struct {
	method, path string
	in, out      any
	wait         time.Duration
	// unknown, when not nil, is set by a try whose request may have taken
	// effect without its answer reaching here (a connection lost after
	// the request went out, a gateway's 502, 503 or 504).
	unknown *bool
}

// do runs c with retries.
func (c *Client) do(ctx context.Context, cl call) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var body []byte
	if cl.in != nil {
		var err error
		if body, err = json.Marshal(cl.in); err != nil {
			return fmt.Errorf("client: encode request: %w", err)
		}
	}
	op := func() error { return c.try(ctx, cl, body) }
	if c.cfg.MaxElapsed < 0 {
		return unwrapPermanent(op())
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.cfg.InitialInterval),
		backoff.WithMaxInterval(c.cfg.MaxInterval),
		backoff.WithMaxElapsedTime(c.cfg.MaxElapsed))
	var notify backoff.Notify
	if c.cfg.RetryNotifyFunc != nil {
		notify = backoff.Notify(c.cfg.RetryNotifyFunc)
	}
	err := backoff.RetryNotify(op, backoff.WithContext(b, ctx), notify)
	return unwrapPermanent(err)
}

func unwrapPermanent(err error) error {
	var p *backoff.PermanentError
	if errors.As(err, &p) {
		return p.Err
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return err
}

// try sends the request once. Permanent errors are wrapped for backoff.
func (c *Client) try(ctx context.Context, cl call, body []byte) error {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout+cl.wait)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(tctx, cl.method, c.base+cl.path, rd)
	if err != nil {
		return backoff.Permanent(fmt.Errorf("client: %w", err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
	}
	req.Header.Set(wire.ClientHeader, c.name) // the broker counts this client as one receiver
	resp, err := c.http.Do(req)
	if err != nil {
		cl.mayHaveTakenEffect(!notSent(err))
		if ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return fmt.Errorf("client: %s %s: %w", cl.method, cl.path, err) // transient: retried
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		cl.mayHaveTakenEffect(true)
		if ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return fmt.Errorf("client: %s %s: read response: %w", cl.method, cl.path, err)
	}
	if resp.StatusCode >= 300 {
		e := errorFrom(resp.StatusCode, data)
		if transient(resp.StatusCode) {
			cl.mayHaveTakenEffect(true)
			return e
		}
		return backoff.Permanent(e)
	}
	if cl.out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, cl.out); err != nil {
			return backoff.Permanent(fmt.Errorf("client: decode response of %s %s: %w", cl.method, cl.path, err))
		}
	}
	return nil
}

// mayHaveTakenEffect records, when maybe, that a try's outcome is unknown.
func (cl call) mayHaveTakenEffect(maybe bool) {
	if maybe && cl.unknown != nil {
		*cl.unknown = true
	}
}

// notSent reports whether err, from sending a request, says the request
// never left: no connection was made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// qpath is the path of a queue's endpoint.
func qpath(queue, rest string) string {
	return "/v1/queues/" + url.PathEscape(queue) + rest
}

// newAttemptID returns 128 random bits in hex.
func newAttemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// convert returns f of every element of in, in order.
func convert[W, C any](in []W, f func(W) C) []C {
	out := make([]C, len(in))
	for i, w := range in {
		out[i] = f(w)
	}
	return out
}

// Ready reports whether the broker is ready (GET /readyz); no key needed.
// It does not retry.
func (c *Client) Ready(ctx context.Context) error {
	cl := *c
	cl.cfg.MaxElapsed = -1
	return cl.do(ctx, call{method: http.MethodGet, path: "/readyz"})
}
