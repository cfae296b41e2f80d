// Package inbound takes signed webhooks from outside into a queue, exactly
// once by id: an http.Handler that verifies each request's Standard Webhooks
// signature with the library relay/webhook signs with, sends its body to the
// source's queue with webhook-id as the MessageID, and answers 2xx only
// after the message committed.
//
// Each Source is a path of its own (the {source} wildcard of the pattern the
// handler is mounted on, POST /v1/inbound/{source} in the broker) with its
// secrets. The signature is the authentication: no access key is asked
// for. A request is refused with 401 and nothing stored when a header is
// missing, no secret of the source verifies the signature, its timestamp is
// further than Source.Tolerance from the store's clock (a replay outside
// the tolerance), or the source is unknown (the same answer as a bad
// signature: a caller learns no source name). A body over
// Source.MaxBodyBytes is 413. Each refusal writes one debug log line.
//
// A provider's retry carries the same webhook-id: inside the queue's
// DedupWindow it is a duplicate, answered 200 with the original's seq, and
// stores nothing. The same id with another body is refused with 409
// (duplicate_conflict); the original stays. Past the window a retry is a
// second message: the window must exceed the provider's retry horizon
// (Source.RetryHorizon states it, and New checks it). The request's
// Content-Type travels as the message's property "content-type".
//
// Providers that sign otherwise (their own header, another HMAC layout) are
// not taken.
package inbound

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// Defaults of Source's zero-valued fields.
const (
	// DefaultTolerance is the Standard Webhooks libraries' own.
	DefaultTolerance    = 5 * time.Minute
	DefaultMaxBodyBytes = mqlite.DefaultMaxMessageBytes
)

// ContentTypeProperty is the property that keeps a request's Content-Type.
const ContentTypeProperty = "content-type"

// Errors of a request that is refused before anything is stored; each is a
// 401 over HTTP.
var (
	// ErrUnsigned: the webhook-id, webhook-timestamp or webhook-signature
	// header is missing, or the timestamp is not a number.
	ErrUnsigned = errors.New("inbound: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	// ErrBadSignature: no secret of the source verifies the signature, or
	// the source is unknown.
	ErrBadSignature = errors.New("inbound: no secret of this source verifies the signature")
	// ErrStale: the signature is valid but its timestamp is further than
	// the source's tolerance from now.
	ErrStale = errors.New("inbound: webhook-timestamp outside the tolerance")
)

// errUnknownSource answers a source name that is not configured as a bad
// signature does; the metrics tell them apart.
var errUnknownSource = fmt.Errorf("%w", ErrBadSignature)

// ErrConfig matches every error of New about its Config, as does
// mqlite.ErrInvalidArgument.
var ErrConfig = errors.New("inbound: invalid config")

// Source is one sender of webhooks and the queue its requests go to.
type Source struct {
	// Name is the source's path segment: 1 to 64 of [A-Za-z0-9._-].
	Name string
	// Queue receives the source's messages. It must exist and have a
	// DedupWindow of at least twice Tolerance and at least RetryHorizon.
	Queue string
	// Secrets verify the signatures: whsec_ followed by base64, as the
	// provider shows them. A request signed by any of them is taken: put
	// the new secret next to the old one while the provider rotates.
	// At least one is required.
	Secrets []string
	// Tolerance is how far a request's webhook-timestamp may be from the
	// store's clock, either way: a captured request replayed later than
	// this is refused. Defaults to 5m.
	Tolerance time.Duration
	// RetryHorizon is how long the provider retries one webhook (each retry
	// is signed anew, so the timestamp check does not stop it): the
	// queue's DedupWindow must cover it, or a late retry would be a second
	// message. Defaults to 0: only the replay bound (twice Tolerance) is
	// checked.
	RetryHorizon time.Duration
	// MaxBodyBytes bounds a request body (413 past it). Defaults to 1 MiB.
	MaxBodyBytes int64
}

// Config configures New. Zero values mean the defaults.
type Config struct {
	// Sources are the senders taken; their names are distinct.
	Sources []Source
	// Logger receives one debug line per refusal (never a body or a
	// secret) and the errors of the store. Defaults to slog.Default().
	Logger *slog.Logger
}

// Handler takes the webhooks of its sources. It is safe for concurrent use
// and starts no goroutine.
type Handler struct {
	st      *mqlite.Store
	log     *slog.Logger
	sources map[string]*source
	counts  *counters
}

// source is a Source with its verifiers.
type source struct {
	Source
	verifiers []*standardwebhooks.Webhook
	window    time.Duration // the least DedupWindow its queue needs
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func configErr(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrConfig, Detail: fmt.Sprintf(format, args...)}
}

// New returns a Handler for cfg's sources on st. It checks cfg and reads
// each source's queue: one that does not exist, or whose DedupWindow is
// off or shorter than the source needs, is refused (the error matches
// ErrConfig and mqlite.ErrInvalidArgument). ctx bounds the reads.
func New(ctx context.Context, st *mqlite.Store, cfg Config) (*Handler, error) {
	if st == nil {
		return nil, configErr("no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{st: st, log: cfg.Logger, sources: make(map[string]*source, len(cfg.Sources))}
	for _, s := range cfg.Sources {
		src, err := newSource(s)
		if err != nil {
			return nil, err
		}
		if _, dup := h.sources[s.Name]; dup {
			return nil, configErr("source %q given twice", s.Name)
		}
		if err := src.checkQueue(ctx, st); err != nil {
			return nil, err
		}
		h.sources[s.Name] = src
	}
	h.counts = newCounters(h.sources)
	return h, nil
}

func newSource(s Source) (*source, error) {
	if !sourceName.MatchString(s.Name) {
		return nil, configErr("source name %q: want 1 to 64 of [A-Za-z0-9._-]", s.Name)
	}
	if len(s.Secrets) == 0 {
		return nil, configErr("source %q: no Secrets", s.Name)
	}
	var err error
	if s.Tolerance, err = setting.Default("Tolerance", s.Tolerance, DefaultTolerance); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	if s.MaxBodyBytes, err = setting.Default("MaxBodyBytes", s.MaxBodyBytes, DefaultMaxBodyBytes); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	if s.RetryHorizon < 0 {
		return nil, configErr("source %q: negative RetryHorizon %v", s.Name, s.RetryHorizon)
	}
	src := &source{Source: s, window: max(2*s.Tolerance, s.RetryHorizon)}
	for i, sec := range s.Secrets {
		// The secret is never quoted: only its place in the list.
		if !strings.HasPrefix(sec, "whsec_") {
			return nil, configErr("source %q: secret %d does not start with whsec_", s.Name, i+1)
		}
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil || len(strings.TrimPrefix(sec, "whsec_")) < 24 {
			return nil, configErr("source %q: secret %d is not whsec_ and base64 of 18 bytes or more", s.Name, i+1)
		}
		src.verifiers = append(src.verifiers, wh)
	}
	return src, nil
}

// checkQueue refuses a queue that cannot make the source's retries
// duplicates: missing, or a DedupWindow off or shorter than s.window.
func (s *source) checkQueue(ctx context.Context, st *mqlite.Store) error {
	q, err := st.GetQueue(ctx, s.Queue)
	if errors.Is(err, mqlite.ErrQueueNotFound) || errors.Is(err, mqlite.ErrInvalidQueueName) {
		return configErr("source %q: queue %q: %v", s.Name, s.Queue, err)
	}
	if err != nil {
		return fmt.Errorf("inbound: source %q: %w", s.Name, err)
	}
	if w := q.Options.DedupWindow; w < s.window {
		has := "no DedupWindow"
		if w > 0 {
			has = "DedupWindow " + w.String()
		}
		return configErr("source %q: queue %q has %s; it needs %v or more (twice Tolerance %v, and RetryHorizon %v), "+
			"or a provider's retry would be a second message", s.Name, s.Queue, has, s.window, s.Tolerance, s.RetryHorizon)
	}
	return nil
}

// ServeHTTP takes one webhook for the source the request's {source} path
// wildcard names. It answers 200 with the message's seq (wire.SendResult)
// once the message committed, or once a duplicate is found; the refusals
// are described in the package comment.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := r.PathValue("source")
	res, err := h.accept(w, r, name)
	if err != nil {
		e := errorOf(err)
		src := name
		if _, known := h.sources[name]; !known {
			src = "" // an unknown name is the caller's text: never a label
		}
		h.counts.refused(src, err)
		level := slog.LevelDebug
		if wire.Status(e.Code) >= 500 {
			level = slog.LevelError
		}
		h.log.Log(r.Context(), level, "inbound: refused", "source", src, "status", wire.Status(e.Code), "err", err)
		writeJSON(w, wire.Status(e.Code), wire.ErrorResponse{Error: e})
		return
	}
	h.counts.took(name, res.Duplicate)
	writeJSON(w, http.StatusOK, wire.FromResult(res))
}

// accept verifies the request and sends its body.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, name string) (outbox.Result, error) {
	src, ok := h.sources[name]
	if !ok {
		return outbox.Result{}, errUnknownSource
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, src.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return outbox.Result{}, errTooLarge(src.MaxBodyBytes)
		}
		return outbox.Result{}, &wireError{wire.CodeInvalid, wire.ReasonMalformed, fmt.Sprintf("reading the request body: %v", err)}
	}
	id, err := src.verify(body, r.Header, h.st.Clock().Now())
	if err != nil {
		return outbox.Result{}, err
	}
	// The window may have changed since New (PUT /v1/queues/{queue}):
	// refuse rather than take a message whose retry would be a second one.
	if err := src.checkQueue(r.Context(), h.st); err != nil {
		if errors.Is(err, ErrConfig) {
			return outbox.Result{}, &wireError{wire.CodeUnavailable, wire.ReasonNoDedupWindow, err.Error()}
		}
		return outbox.Result{}, err
	}
	msg := outbox.Message{Body: body, MessageID: id}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		msg.Properties = map[string]string{ContentTypeProperty: ct}
	}
	res, err := outbox.Send(r.Context(), h.st, src.Queue, msg)
	if err != nil {
		return outbox.Result{}, err
	}
	if res[0].Err != nil {
		return outbox.Result{}, res[0].Err // the same id with another body: the original stays
	}
	return res[0], nil
}

// verify checks the request's signature with the source's secrets and its
// timestamp against now, and returns its webhook-id.
func (s *source) verify(body []byte, header http.Header, now time.Time) (string, error) {
	id := header.Get(standardwebhooks.HeaderWebhookID)
	ts, err := strconv.ParseInt(header.Get(standardwebhooks.HeaderWebhookTimestamp), 10, 64)
	if id == "" || err != nil || header.Get(standardwebhooks.HeaderWebhookSignature) == "" {
		return "", ErrUnsigned
	}
	verified := false
	for _, v := range s.verifiers {
		if v.VerifyIgnoringTimestamp(body, header) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return "", ErrBadSignature
	}
	// The library checks the timestamp against the wall clock with its
	// own fixed tolerance: the store's clock and the source's are used.
	if d := now.Sub(time.Unix(ts, 0)); d > s.Tolerance || d < -s.Tolerance {
		return "", fmt.Errorf("%w: %s is %v from now, the tolerance is %v", ErrStale, header.Get(standardwebhooks.HeaderWebhookTimestamp), d.Round(time.Second), s.Tolerance)
	}
	return id, nil
}

// wireError is an error answered as it is: code, reason and message.
type wireError struct{ code, reason, msg string }

func (e *wireError) Error() string { return e.msg }

func errTooLarge(limit int64) error {
	return &wireError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", limit)}
}

// errorOf is the answer of err.
func errorOf(err error) wire.Error {
	var we *wireError
	switch {
	case errors.As(err, &we):
		return wire.Error{Code: we.code, Reason: we.reason, Message: we.msg}
	case errors.Is(err, ErrUnsigned), errors.Is(err, ErrBadSignature), errors.Is(err, ErrStale):
		return wire.Error{Code: wire.CodeUnauthorized, Reason: wire.ReasonBadSignature, Message: err.Error()}
	}
	return *wire.ErrorOf(err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
