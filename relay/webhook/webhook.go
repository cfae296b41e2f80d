// Package webhook is a relay.Sink that POSTs each message to an HTTP
// endpoint, signed with the Standard Webhooks scheme.
//
// Each request carries the message's body (or, with Config.Envelope, a JSON
// envelope of the whole message) and the headers webhook-id (relay.ID, the
// same on every retry), webhook-timestamp and webhook-signature: one "v1,"
// HMAC-SHA256 signature per secret of Config.Secrets, so that a receiver can
// rotate its secret without a gap. A receiver verifies with the same
// library:
//
//	wh, err := standardwebhooks.NewWebhook("whsec_...")
//	err = wh.Verify(body, r.Header) // nil: authentic and recent
//
// and drops a webhook-id it has already processed: delivery is at least
// once. The message's sequence number, delivery count, subject and
// properties travel as Mqlite-* headers too.
//
// A 2xx answer is delivered. 408, 425, 429, every 5xx, a timeout and a
// connection error are retried, after the answer's Retry-After (seconds or an
// HTTP date, capped by Config.MaxRetryAfter) or the relay's backoff. Every
// other status (redirects are not followed) dead-letters the message, with
// the status and the start of the answer's body in its description.
//
// The URL's path and query often hold the endpoint's token, so errors (a
// message's last error, which consumer keys read, and the relay's log) show
// the URL as scheme://host:port/REDACTED.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/relay"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultTimeout       = 30 * time.Second
	DefaultMaxConcurrent = 16
	DefaultMaxRetryAfter = time.Hour
)

// PropertyHeaderPrefix starts the header of each property: a property k
// travels as PropertyHeaderPrefix+k when k is a valid header name and its
// value a valid header value; use Config.Envelope to carry any property.
// The other fields travel in the relay.Header* headers.
const PropertyHeaderPrefix = "Mqlite-Property-"

// descriptionMax bounds how much of a refusing answer's body goes into the
// dead letter's description.
const descriptionMax = 1 << 10

// drainMax bounds how much of an answer's body is read (and thrown away)
// so that its connection can be reused.
const drainMax = 64 << 10

// Config configures a Sink. Zero values mean the defaults.
type Config struct {
	// URL is the endpoint every message is POSTed to: http or https.
	// Required.
	URL string
	// Secrets sign every request, each with its own signature: whsec_
	// followed by base64, as the Standard Webhooks libraries make them.
	// Put the new secret next to the old one while receivers rotate.
	// At least one is required.
	Secrets []string
	// Envelope, when true, POSTs a JSON Envelope of the message
	// (application/json) instead of its body.
	Envelope bool
	// Timeout bounds each request, from connecting to reading the answer.
	// Defaults to 30s.
	Timeout time.Duration
	// MaxConcurrent is how many requests may be open to the endpoint at
	// once, over every Send. Defaults to 16.
	MaxConcurrent int
	// MaxRetryAfter caps the delay an answer's Retry-After can ask for.
	// Defaults to 1h.
	MaxRetryAfter time.Duration
	// Header holds extra headers for every request (an Authorization, a
	// User-Agent). The sink's own headers win.
	Header http.Header
	// Transport sends the requests. Defaults to a clone of
	// http.DefaultTransport. Redirects are never followed.
	Transport http.RoundTripper
}

// Envelope is the JSON body of a request with Config.Envelope: the whole
// message. Body is base64, as encoding/json writes a []byte.
type Envelope struct {
	ID            string            `json:"id"`
	Queue         string            `json:"queue"`
	Seq           int64             `json:"seq"`
	GroupID       string            `json:"group_id,omitempty"`
	Subject       string            `json:"subject,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
	DeliveryCount int               `json:"delivery_count"`
	EnqueuedAt    time.Time         `json:"enqueued_at"`
	Body          []byte            `json:"body"`
}

// Sink POSTs messages to one endpoint. It is safe for concurrent use.
type Sink struct {
	cfg     Config
	shown   string // cfg.URL as errors show it: redacted
	signers []*standardwebhooks.Webhook
	client  *http.Client
	slots   chan struct{} // one per request that may be open
}

var _ relay.Sink = (*Sink)(nil)

// now is the clock of webhook-timestamp: the wall clock, because receivers
// check it against theirs (Verify allows 5 minutes either way).
var now = time.Now

// New returns a Sink for cfg. It validates cfg (errors match
// mqlite.ErrInvalidArgument) and opens no connection.
func New(cfg Config) (*Sink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL itself is not shown: its path or query may hold a secret.
		return nil, invalid("URL is not an absolute http or https URL")
	}
	if len(cfg.Secrets) == 0 {
		return nil, invalid("no Secrets: at least one whsec_ secret signs the requests")
	}
	s := &Sink{cfg: cfg, shown: redact(u)}
	for i, sec := range cfg.Secrets {
		if !strings.HasPrefix(sec, "whsec_") {
			return nil, invalid("Secrets[%d] lacks the whsec_ prefix", i)
		}
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			return nil, invalid("Secrets[%d]: %v", i, err)
		}
		s.signers = append(s.signers, wh)
	}
	if s.cfg.Timeout, err = setting.Default("Timeout", cfg.Timeout, DefaultTimeout); err != nil {
		return nil, invalid("%v", err)
	}
	if s.cfg.MaxRetryAfter, err = setting.Default("MaxRetryAfter", cfg.MaxRetryAfter, DefaultMaxRetryAfter); err != nil {
		return nil, invalid("%v", err)
	}
	if s.cfg.MaxConcurrent, err = setting.Default("MaxConcurrent", cfg.MaxConcurrent, DefaultMaxConcurrent); err != nil {
		return nil, invalid("%v", err)
	}
	if s.cfg.Transport == nil {
		s.cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	s.client = &http.Client{
		Transport:     s.cfg.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.slots = make(chan struct{}, s.cfg.MaxConcurrent)
	return s, nil
}

// Close closes the idle connections of the sink's Transport. Call it once
// every Send has returned.
func (s *Sink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// Send POSTs each message, up to Config.MaxConcurrent at once over all
// Sends, and returns each one's outcome. Cancelling ctx abandons the
// requests in flight: their messages are retried.
func (s *Sink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			out[i] = relay.RetryAfter(fmt.Errorf("webhook: %w", ctx.Err()), 0)
			continue
		}
		wg.Go(func() {
			defer func() { <-s.slots }()
			out[i] = s.post(ctx, m)
		})
	}
	wg.Wait()
	return out
}

// post sends one message and classifies the answer.
func (s *Sink) post(ctx context.Context, m mqlite.Message) relay.Outcome {
	req, err := s.request(ctx, m)
	if err != nil {
		return relay.DeadLetter("webhook: bad request", err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	resp, err := s.client.Do(req.WithContext(rctx))
	if err != nil {
		// The error names the URL ("Post \"https://...\": ..."), and it
		// goes into the message's last error, which consumer keys read,
		// and into the relay's log: show it redacted.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			ue.URL = s.shown
		}
		return relay.RetryAfter(fmt.Errorf("webhook: %w", err), 0)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, descriptionMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainMax))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return relay.Delivered()
	case Retryable(resp.StatusCode):
		after := RetryAfter(resp.Header.Get("Retry-After"), now(), s.cfg.MaxRetryAfter)
		return relay.RetryAfter(fmt.Errorf("webhook: HTTP %d", resp.StatusCode), after)
	default:
		return relay.DeadLetter(fmt.Sprintf("webhook: HTTP %d", resp.StatusCode),
			fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(head)))
	}
}

// request builds the signed POST of m.
func (s *Sink) request(ctx context.Context, m mqlite.Message) (*http.Request, error) {
	id := relay.ID(m)
	body, ctype := m.Body, "application/octet-stream"
	if ct := m.Properties["content-type"]; ct != "" && validValue(ct) {
		ctype = ct
	}
	if s.cfg.Envelope {
		var err error
		body, err = json.Marshal(Envelope{
			ID: id, Queue: m.Queue, Seq: m.Seq, GroupID: m.GroupID, Subject: m.Subject,
			Properties: m.Properties, DeliveryCount: m.DeliveryCount, EnqueuedAt: m.EnqueuedAt, Body: m.Body,
		})
		if err != nil {
			return nil, fmt.Errorf("webhook: envelope: %w", err)
		}
		ctype = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	for k, vs := range s.cfg.Header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	for k, v := range m.Properties {
		if validName(k) && validValue(v) {
			req.Header.Set(PropertyHeaderPrefix+k, v)
		}
	}
	h := req.Header
	relay.TraceContext(m, h.Set) // traceparent, tracestate: W3C Trace Context
	h.Set("Content-Type", ctype)
	h.Set(relay.HeaderQueue, m.Queue)
	h.Set(relay.HeaderSeq, strconv.FormatInt(m.Seq, 10))
	h.Set(relay.HeaderDeliveryCount, strconv.Itoa(m.DeliveryCount))
	setIf(h, relay.HeaderSubject, m.Subject)
	setIf(h, relay.HeaderGroupID, m.GroupID)
	ts := now()
	sigs := make([]string, len(s.signers))
	for i, wh := range s.signers {
		if sigs[i], err = wh.Sign(id, ts, body); err != nil {
			return nil, fmt.Errorf("webhook: sign: %w", err)
		}
	}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	return req, nil
}

// redacted replaces the path and the query of a URL that redact shows.
const redacted = "/REDACTED"

// redact returns u as the sink's errors show it: its scheme, host and
// port, with redacted for a path or a query (where webhook endpoints keep
// their tokens) and without its user information.
func redact(u *url.URL) string {
	shown := u.Scheme + "://" + u.Host
	if u.Path != "" || u.RawQuery != "" || u.Opaque != "" || u.Fragment != "" {
		shown += redacted
	}
	return shown
}

// setIf sets a header whose value is valid and not empty.
func setIf(h http.Header, k, v string) {
	if v != "" && validValue(v) {
		h.Set(k, v)
	}
}

// Retryable reports whether an HTTP status asks for a retry: 408 Request
// Timeout, 425 Too Early, 429 Too Many Requests and every 5xx.
func Retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500 && status <= 599
}

// RetryAfter parses a Retry-After header value (delay-seconds or an
// HTTP-date, read against now) into a delay capped at maxDelay. An empty,
// malformed or past value is zero: the relay's backoff decides.
func RetryAfter(v string, now time.Time, maxDelay time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(maxDelay/time.Second) {
			return maxDelay
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxDelay)
}

// ErrInvalidConfig is matched, together with mqlite.ErrInvalidArgument, by
// every error of New.
var ErrInvalidConfig = errors.New("webhook: invalid config")

func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}

// validName reports whether k is an HTTP header name: a token (RFC 9110).
func validName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 0x7f || c <= ' ' || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validValue reports whether v can be an HTTP header value: no control
// bytes but tab (so no CR or LF that would split the header).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
