// Package inbound takes signed webhooks from outside into a queue, exactly
// once by id: an http.Handler that verifies each request's Standard Webhooks
// signature with the library relay/webhook signs with, sends its body to the
// sender's queue with webhook-id as the MessageID, and answers 2xx only
// after the message committed.
//
// Each Sender is a path of its own (the {source} wildcard of the pattern the
// handler is mounted on, POST /v1/inbound/{source} in the broker: the
// wildcard keeps the name every mount already gives it) with its secrets.
// The signature is the authentication: no access key is asked for, so the
// handler checks everything that needs no body first, and holds few
// bodies at once:
//
//   - the headers: a missing webhook-id, webhook-timestamp or
//     webhook-signature, or a timestamp that is not a number, is 401; a
//     timestamp further than Sender.Tolerance from the store's clock (a
//     replay outside the tolerance, or a skewed clock) is 401; a webhook-id
//     or Content-Type the queue could not store (too long, not UTF-8) is
//     400; a Content-Length over Sender.MaxBodyBytes is 413;
//   - room for the body: the bytes of the bodies held at once are bounded
//     over all senders (Config.MaxHeldBytes) and for each sender
//     (Sender.MaxHeldBytes); a request past either is 503 with Retry-After
//     before any of its body is read;
//   - then the body (413 past Sender.MaxBodyBytes) and its signature: no
//     secret of the sender verifies it, 401.
//
// A request to a sender name that is not configured goes the same way, as
// to a sender with the largest limits of the configured ones and a secret
// nobody has: the same status, text and headers, its body read or not
// alike, the same work; a caller learns no sender name. Each refusal writes
// one debug log line and counts in mqlite_inbound_refused_total.
//
// A provider's retry carries the same webhook-id: inside the queue's
// DedupWindow it is a duplicate, answered 200 with the original's seq, and
// stores nothing. The same id with another body is refused with 409
// (duplicate_conflict); the original stays. Past the window a retry is a
// second message: the window must exceed the provider's retry horizon
// (Sender.RetryHorizon states it, DefaultRetryHorizon when it does not, and
// New checks it). The request's Content-Type travels as the message's
// property "content-type".
//
// Providers that sign otherwise (their own header, another HMAC layout) are
// not taken.
package inbound

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
	"github.com/mqlite/mqlite/internal/setting"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

// Limits and defaults of Config's and Sender's zero-valued fields.
const (
	// DefaultTolerance is the Standard Webhooks libraries' own.
	DefaultTolerance = 5 * time.Minute
	// DefaultRetryHorizon is how long a sender's provider is taken to
	// retry one webhook when its Sender does not say: the common providers
	// retry for days (three, for the longest-known of them), so its queue
	// needs a DedupWindow of three days or more.
	DefaultRetryHorizon = 72 * time.Hour
	// MaxContentTypeLen bounds the Content-Type a request may carry (400
	// past it): it is stored with the body.
	MaxContentTypeLen = 256
	// MetadataRoom is the room a message stored by the handler needs
	// besides its body: the longest webhook-id and Content-Type property
	// (as JSON, where a character takes up to 6 bytes). A sender's
	// MaxBodyBytes and this room fit in the store's MaxMessageBytes.
	MetadataRoom = 2 << 10
	// DefaultMaxBodyBytes is a sender's MaxBodyBytes on a store of the
	// default MaxMessageBytes (1 MiB): that limit less MetadataRoom. On
	// another store the default is its MaxMessageBytes less MetadataRoom.
	DefaultMaxBodyBytes = mqlite.DefaultMaxMessageBytes - MetadataRoom
	// DefaultMaxHeldBytes is Config.MaxHeldBytes's default.
	DefaultMaxHeldBytes = 64 << 20
	// RetryAfter is the Retry-After (in seconds) of a 503.
	RetryAfter = 5
)

// ContentTypeProperty is the property that keeps a request's Content-Type.
const ContentTypeProperty = "content-type"

// Errors of a request that is refused before anything is stored; each is a
// 401 over HTTP.
var (
	// ErrUnsigned: the webhook-id, webhook-timestamp or webhook-signature
	// header is missing, or the timestamp is not a number.
	ErrUnsigned = errors.New("inbound: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	// ErrBadSignature: no secret of the sender verifies the signature, or
	// the sender is unknown.
	ErrBadSignature = errors.New("inbound: no secret of this source verifies the signature")
	// ErrStale: the timestamp is further than the sender's tolerance from
	// now (checked before the signature, which needs the body).
	ErrStale = errors.New("inbound: webhook-timestamp outside the tolerance")
)

// errUnknownSender answers a sender name that is not configured as a bad
// signature does; the metrics tell them apart.
var errUnknownSender = fmt.Errorf("%w", ErrBadSignature)

// ErrInvalidConfig matches every error of New about its Config, as does
// mqlite.ErrInvalidArgument.
var ErrInvalidConfig = errors.New("inbound: invalid config")

// Sender is one sender of webhooks and the queue its requests go to.
type Sender struct {
	// Name is the sender's path segment: 1 to 64 of [A-Za-z0-9._-].
	Name string
	// Queue receives the sender's messages. It must exist and have a
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
	// message. Defaults to DefaultRetryHorizon (3 days); give the
	// provider's own when it retries for less, or more.
	RetryHorizon time.Duration
	// MaxBodyBytes bounds a request body (413 past it). With MetadataRoom
	// it must fit the store's MaxMessageBytes, so that a body under the
	// limit is never refused for what is stored beside it. Defaults to the
	// store's MaxMessageBytes less MetadataRoom (DefaultMaxBodyBytes on a
	// store of the default limit).
	MaxBodyBytes int64
	// MaxHeldBytes bounds the bytes of this sender's bodies held at once
	// (its share of Config.MaxHeldBytes): past it a request is 503 with
	// Retry-After, its body unread. Defaults to a quarter of
	// Config.MaxHeldBytes, and at least MaxBodyBytes; -1: no share (the
	// Config's bound alone).
	MaxHeldBytes int64
}

// Config configures New. Zero values mean the defaults.
type Config struct {
	// Senders are the senders taken; their names are distinct.
	Senders []Sender
	// Logger receives one debug line per refusal (never a body or a
	// secret) and the errors of the store. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxHeldBytes bounds the bytes of the request bodies held at once,
	// over every sender and unknown names: a body counts from before it is
	// read (its Content-Length, or its sender's MaxBodyBytes when it has
	// none) until its answer, and a request past the bound is 503 with
	// Retry-After, its body unread. Defaults to 64 MiB; at least the
	// largest MaxBodyBytes.
	MaxHeldBytes int64
}

// Handler takes the webhooks of its senders. It is safe for concurrent use
// and starts no goroutine.
type Handler struct {
	st      *mqlite.Store
	log     *slog.Logger
	senders map[string]*sender
	unknown *sender // the stand-in of every name not in senders
	held    *room   // the bytes of the bodies held, over all senders
	counts  *counters
}

// sender is a Sender with its verifiers.
type sender struct {
	Sender
	verifiers []*standardwebhooks.Webhook
	window    time.Duration // the least DedupWindow its queue needs
	held      *room         // its share; nil: none
}

var senderName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func configErr(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}

// New returns a Handler for cfg's senders on st. It checks cfg and reads
// each sender's queue: one that does not exist, or whose DedupWindow is
// off or shorter than the sender needs, is refused (the error matches
// ErrInvalidConfig and mqlite.ErrInvalidArgument). ctx bounds the reads.
func New(ctx context.Context, st *mqlite.Store, cfg Config) (*Handler, error) {
	if st == nil {
		return nil, configErr("no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var err error
	if cfg.MaxHeldBytes, err = setting.Default("MaxHeldBytes", cfg.MaxHeldBytes, DefaultMaxHeldBytes); err != nil {
		return nil, configErr("%v", err)
	}
	storeMax, err := driver.Of(st.DB()).MaxMessageBytes(ctx, st.DB())
	if err != nil {
		return nil, fmt.Errorf("inbound: reading the store's MaxMessageBytes: %w", err)
	}
	h := &Handler{st: st, log: cfg.Logger, senders: make(map[string]*sender, len(cfg.Senders)), held: newRoom(cfg.MaxHeldBytes)}
	// The stand-in of unknown names: the largest limits of the senders (the
	// defaults when there are none), secrets nobody has.
	stand := Sender{Name: "unknown", MaxHeldBytes: -1}
	most := 0 // secrets of a sender
	for _, s := range cfg.Senders {
		src, err := newSender(s, storeMax, cfg.MaxHeldBytes)
		if err != nil {
			return nil, err
		}
		if _, dup := h.senders[s.Name]; dup {
			return nil, configErr("source %q given twice", s.Name)
		}
		if err := src.checkQueue(ctx, st); err != nil {
			return nil, err
		}
		h.senders[s.Name] = src
		stand.Tolerance, stand.MaxBodyBytes = max(stand.Tolerance, src.Tolerance), max(stand.MaxBodyBytes, src.MaxBodyBytes)
		most = max(most, len(s.Secrets))
	}
	if stand.MaxBodyBytes == 0 { // no sender: the default limit, within the bound
		stand.MaxBodyBytes = min(storeMax-MetadataRoom, cfg.MaxHeldBytes)
	}
	// As many secrets as the sender with the most: as much work to refuse.
	for range max(1, most) {
		var key [24]byte
		_, _ = rand.Read(key[:]) // never fails
		stand.Secrets = append(stand.Secrets, "whsec_"+base64.StdEncoding.EncodeToString(key[:]))
	}
	if h.unknown, err = newSender(stand, storeMax, cfg.MaxHeldBytes); err != nil {
		return nil, err
	}
	h.counts = newCounters(h.senders, h.held)
	return h, nil
}

func newSender(s Sender, storeMax, maxHeld int64) (*sender, error) {
	if !senderName.MatchString(s.Name) {
		return nil, configErr("source name %q: want 1 to 64 of [A-Za-z0-9._-]", s.Name)
	}
	if len(s.Secrets) == 0 {
		return nil, configErr("source %q: no Secrets", s.Name)
	}
	var err error
	if s.Tolerance, err = setting.Default("Tolerance", s.Tolerance, DefaultTolerance); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	if s.MaxBodyBytes, err = setting.Default("MaxBodyBytes", s.MaxBodyBytes, storeMax-MetadataRoom); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	if s.MaxBodyBytes+MetadataRoom > storeMax {
		return nil, configErr("source %q: MaxBodyBytes %d and the %d bytes of its id and Content-Type pass the store's MaxMessageBytes %d: "+
			"give %d at most, or raise the store's limit", s.Name, s.MaxBodyBytes, MetadataRoom, storeMax, storeMax-MetadataRoom)
	}
	if s.MaxBodyBytes > maxHeld {
		return nil, configErr("source %q: MaxBodyBytes %d passes the bytes held at once, MaxHeldBytes %d", s.Name, s.MaxBodyBytes, maxHeld)
	}
	if s.MaxHeldBytes, err = setting.DefaultOrOff("MaxHeldBytes", s.MaxHeldBytes, min(maxHeld, max(maxHeld/4, s.MaxBodyBytes)), -1); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	if s.MaxHeldBytes != -1 && s.MaxHeldBytes < s.MaxBodyBytes {
		return nil, configErr("source %q: MaxHeldBytes %d is under its MaxBodyBytes %d", s.Name, s.MaxHeldBytes, s.MaxBodyBytes)
	}
	if s.RetryHorizon, err = setting.Default("RetryHorizon", s.RetryHorizon, DefaultRetryHorizon); err != nil {
		return nil, configErr("source %q: %v", s.Name, err)
	}
	src := &sender{Sender: s, window: max(2*s.Tolerance, s.RetryHorizon)}
	if s.MaxHeldBytes > 0 {
		src.held = newRoom(s.MaxHeldBytes)
	}
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

// checkQueue refuses a queue that cannot make the sender's retries
// duplicates: missing, or a DedupWindow off or shorter than s.window.
func (s *sender) checkQueue(ctx context.Context, st *mqlite.Store) error {
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
			has = "DedupWindow " + short(w)
		}
		return configErr("source %q: queue %q has %s; it needs %s or more (twice the tolerance %s, and the retry horizon %s), "+
			"or a provider's retry would be a second message: raise the queue's window (mqlite queues update %s --dedup-window %s) "+
			"or give the provider's own horizon (RetryHorizon; serve --inbound-retry-horizon)", s.Name, s.Queue, has, short(s.window), short(s.Tolerance), short(s.RetryHorizon), s.Queue, short(s.window))
	}
	return nil
}

// short is d without its trailing zero units: 72h, 10m, 1h30m.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ServeHTTP takes one webhook for the sender the request's {source} path
// wildcard names. It answers 200 with the message's seq (wire.SendResult)
// once the message committed, or once a duplicate is found; the refusals
// are described in the package comment.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	name := r.PathValue("source")
	src, known := h.senders[name]
	if !known {
		src, name = h.unknown, "" // an unknown name is the caller's text: never a label
	}
	res, err := h.accept(w, r, src)
	if err != nil {
		if !known && errors.Is(err, ErrBadSignature) {
			err = errUnknownSender
		}
		e := errorOf(err)
		h.counts.refused(name, err)
		status := wire.Status(e.Code)
		level := slog.LevelDebug
		if status >= 500 && !errors.Is(err, errBusy) {
			level = slog.LevelError
		}
		h.log.Log(r.Context(), level, "inbound: refused", "source", name, "status", status, "err", err)
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		}
		writeJSON(w, status, wire.ErrorResponse{Error: e})
		return
	}
	h.counts.took(name, res.Duplicate)
	writeJSON(w, http.StatusOK, wire.FromResult(res))
}

// accept checks the request's headers, takes room for its body, reads and
// verifies it, and sends it.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, src *sender) (outbox.Result, error) {
	id, err := src.checkHeaders(r, h.st.Clock().Now())
	if err != nil {
		return outbox.Result{}, err
	}
	if r.ContentLength > src.MaxBodyBytes {
		return outbox.Result{}, errTooLarge(src.MaxBodyBytes)
	}
	n := r.ContentLength
	if n < 0 {
		n = src.MaxBodyBytes // no length: room for the largest
	}
	if !h.held.take(n) {
		return outbox.Result{}, errBusy
	}
	defer h.held.give(n)
	if src.held != nil {
		if !src.held.take(n) {
			return outbox.Result{}, errBusy
		}
		defer src.held.give(n)
	}
	body, err := readBody(w, r, n, src.MaxBodyBytes)
	if err != nil {
		return outbox.Result{}, err
	}
	if !src.verified(body, r.Header) {
		return outbox.Result{}, ErrBadSignature
	}
	// The window may have changed since New (PUT /v1/queues/{queue}):
	// refuse rather than take a message whose retry would be a second one.
	if err := src.checkQueue(r.Context(), h.st); err != nil {
		if errors.Is(err, ErrInvalidConfig) {
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

// checkHeaders checks what needs no body: the three headers, the id and
// Content-Type the queue must be able to store, and the timestamp against
// now. It returns the webhook-id.
func (s *sender) checkHeaders(r *http.Request, now time.Time) (string, error) {
	id := r.Header.Get(standardwebhooks.HeaderWebhookID)
	tsText := r.Header.Get(standardwebhooks.HeaderWebhookTimestamp)
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if id == "" || err != nil || r.Header.Get(standardwebhooks.HeaderWebhookSignature) == "" {
		return "", ErrUnsigned
	}
	if len(id) > mqlite.MaxMessageIDLen || !utf8.ValidString(id) {
		return "", errs.Invalidf(mqlite.ErrInvalidMessage, "webhook-id of %d bytes: want UTF-8 of at most %d bytes", len(id), mqlite.MaxMessageIDLen)
	}
	if ct := r.Header.Get("Content-Type"); len(ct) > MaxContentTypeLen || !utf8.ValidString(ct) {
		return "", errs.Invalidf(mqlite.ErrInvalidMessage, "Content-Type of %d bytes: want UTF-8 of at most %d bytes", len(ct), MaxContentTypeLen)
	}
	// The library checks the timestamp against the wall clock with its
	// own fixed tolerance: the store's clock and the sender's are used.
	if skew, ok := skewOf(ts, now); !ok || skew > s.Tolerance || skew < -s.Tolerance {
		return "", fmt.Errorf("%w: %s is %s, the tolerance is %v", ErrStale, tsText, skewText(ts, now), s.Tolerance)
	}
	return id, nil
}

// maxSkewSeconds bounds the timestamps whose distance from now is a
// time.Duration (about 292 years); one further is stale in any case.
const maxSkewSeconds = 1 << 32

// skewOf is how far the timestamp ts (seconds) is ahead of now (negative:
// behind); false when it is too far to say as a Duration.
func skewOf(ts int64, now time.Time) (time.Duration, bool) {
	sec := now.Unix()
	if ts > sec+maxSkewSeconds || ts < sec-maxSkewSeconds {
		return 0, false
	}
	return time.Unix(ts, 0).Sub(now), true
}

// skewText says how far the timestamp ts (seconds) is from now, and which
// way, for a refusal: "10m0s ahead of now", "3 days behind now".
func skewText(ts int64, now time.Time) string {
	var text string
	if skew, ok := skewOf(ts, now); ok && skew.Abs() < 48*time.Hour {
		way := "ahead of"
		if skew < 0 {
			way = "behind"
		}
		text = skew.Abs().Round(time.Second).String() + " " + way + " now"
	} else {
		diff := float64(ts) - float64(now.Unix()) // never overflows, exact enough for days
		way := "ahead of"
		if diff < 0 {
			way, diff = "behind", -diff
		}
		text = fmt.Sprintf("%.0f days %s now", diff/86400, way)
	}
	if ts > 1e11 || ts < -1e11 { // beyond the year 5000: milliseconds, likely
		text += " (in milliseconds? webhook-timestamp is in seconds)"
	}
	return text
}

// readBody reads the request body into n bytes held for it: n is its
// Content-Length, or limit when it has none.
func readBody(w http.ResponseWriter, r *http.Request, n, limit int64) ([]byte, error) {
	buf := make([]byte, n)
	k, err := io.ReadFull(http.MaxBytesReader(w, r.Body, limit), buf)
	switch {
	case r.ContentLength < 0 && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		return buf[:k], nil // a body of no stated length, under the limit
	case r.ContentLength < 0 && err == nil:
		// As long as the limit: one byte more is past it.
		if m, _ := r.Body.Read(make([]byte, 1)); m > 0 {
			return nil, errTooLarge(limit)
		}
		return buf, nil
	case err == nil:
		return buf, nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge(limit)
	}
	return nil, &wireError{wire.CodeInvalid, wire.ReasonMalformed, fmt.Sprintf("reading the request body: %v", err)}
}

// verified reports whether a secret of s verifies the request's signature
// of body (its timestamp was checked by checkHeaders).
func (s *sender) verified(body []byte, header http.Header) bool {
	for _, v := range s.verifiers {
		if v.VerifyIgnoringTimestamp(body, header) == nil {
			return true
		}
	}
	return false
}

// room counts the bytes of the bodies held against a bound, never waiting:
// what does not fit is refused. Safe for concurrent use.
type room struct {
	mu        sync.Mutex
	max, held int64
}

func newRoom(max int64) *room { return &room{max: max} }

// take counts n more bytes, or reports false when they do not fit.
func (r *room) take(n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held+n > r.max {
		return false
	}
	r.held += n
	return true
}

// give gives back n bytes take counted.
func (r *room) give(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held -= n
}

// bytes is the count of bytes held.
func (r *room) bytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// wireError is an error answered as it is: code, reason and message.
type wireError struct{ code, reason, msg string }

func (e *wireError) Error() string { return e.msg }

func errTooLarge(limit int64) error {
	return &wireError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", limit)}
}

// errBusy refuses a request whose body would pass the bytes held at once.
var errBusy error = &wireError{wire.CodeUnavailable, wire.ReasonInboundBusy,
	"inbound: too many webhook bodies held at once: retry later"}

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
