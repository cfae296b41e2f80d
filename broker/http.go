package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
)

// apiError is an error of the broker itself (no root sentinel): its code,
// reason and message go to the client as they are.
type apiError struct {
	code, reason, msg string
}

func (e *apiError) Error() string { return e.msg }

func errMalformed(format string, args ...any) error {
	return &apiError{wire.CodeInvalid, wire.ReasonMalformed, fmt.Sprintf(format, args...)}
}

// decode reads exactly one JSON object of type T from body: anything else
// (null, an array, a string), unknown fields, trailing data, text that is
// not UTF-8 and bodies over the limit are refused. encoding/json would
// replace invalid UTF-8 with U+FFFD, and two distinct names would become
// one: the raw bytes are checked first.
func decode[T any](body io.Reader) (T, error) {
	var v T
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return v, &apiError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes: %s", mbe.Limit, raiseBody)}
		}
		return v, errMalformed("reading the request body: %v", err)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return v, errMalformed("empty request body")
	case trimmed[0] != '{':
		return v, errMalformed("the request body is not a JSON object")
	}
	if err := checkUTF8(data); err != nil {
		return v, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, errMalformed("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return v, errMalformed("malformed JSON: data after the value")
	}
	return v, nil
}

// checkUTF8 refuses a JSON text that is not UTF-8 or whose strings escape
// half of a surrogate pair (\ud800 alone), which no UTF-8 text can hold.
func checkUTF8(data []byte) error {
	if !utf8.Valid(data) {
		return errMalformed("the request body is not valid UTF-8")
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if i >= len(data) || data[i] != 'u' {
			continue
		}
		r, ok := hex4(data[i+1:])
		if !ok || !utf16.IsSurrogate(r) {
			continue
		}
		// A high half must come first, followed at once by a low half.
		lo, ok2 := rune(0), false
		if r < 0xdc00 && len(data) >= i+11 && data[i+5] == '\\' && data[i+6] == 'u' {
			lo, ok2 = hex4(data[i+7:])
		}
		if !ok2 || utf16.DecodeRune(r, lo) == utf8.RuneError {
			return errMalformed("the request body escapes half of a UTF-16 surrogate pair")
		}
		i += 10
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// decodeBytes is decode on a byte slice (for the fuzz tests).
func decodeBytes[T any](b []byte) (T, error) { return decode[T](bytes.NewReader(b)) }

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// raiseBody and raiseMessage say, in a 413's text, what raises each limit.
const (
	raiseBody    = "the broker's limit (mqlite serve --max-body, which grows with --max-message-bytes)"
	raiseMessage = "the store's limit (mqlite serve --max-message-bytes)"
)

// errorBody gives the response of err.
func errorBody(err error) wire.Error {
	var ae *apiError
	if errors.As(err, &ae) {
		return wire.Error{Code: ae.code, Reason: ae.reason, Message: ae.msg}
	}
	e := *wire.ErrorOf(err)
	if errors.Is(err, mqlite.ErrMessageTooLarge) {
		e.Message += ": " + raiseMessage
	}
	return e
}

// keyCtx carries the request's key.
type keyCtx struct{}

func keyOf(ctx context.Context) keys.Key {
	k, _ := ctx.Value(keyCtx{}).(keys.Key)
	return k
}

// anyRole in an endpoint lets every valid key through.
const anyRole keys.Role = ""

// require checks that the request's key has role (anyRole: any) on name.
func require(ctx context.Context, role keys.Role, name string) error {
	k := keyOf(ctx)
	if role != anyRole && !k.Scope.HasRole(role) {
		return &apiError{wire.CodeForbidden, wire.ReasonRole, fmt.Sprintf("key %s has role %s; this needs %s", k.ID, k.Scope.Role, role)}
	}
	if name != "" && !k.Scope.HasQueue(name) {
		return &apiError{wire.CodeForbidden, wire.ReasonQueue, fmt.Sprintf("key %s does not cover %q", k.ID, name)}
	}
	return nil
}

// statusWriter records the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
	w.ResponseWriter.WriteHeader(s)
}

// Unwrap gives http.ResponseController the connection's writer (flushes,
// deadlines and full duplex, for the streaming receive).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// result is what an endpoint answers: a status and a body (nil for 204),
// or a handler that writes the response itself (raw, for /metrics).
type result struct {
	status int
	body   any
	raw    http.Handler
}

func ok(body any) (result, error) { return result{status: http.StatusOK, body: body}, nil }

func created(body any) (result, error) { return result{status: http.StatusCreated, body: body}, nil }

func noContent() (result, error) { return result{status: http.StatusNoContent}, nil }

// endpoint is one route: the role it needs, the path wildcard naming the
// queue or topic it needs (empty when the handler checks a name itself),
// the handler, and how its answer counts in Config.MaxAnswerBytes.
type endpoint struct {
	pattern string
	role    keys.Role
	scope   string
	fn      func(r *http.Request) (result, error)
	answer  answerKind
}

// wrap runs an endpoint: body limit, authentication, authorisation, the
// handler, the response and the request log line.
func (s *Server) wrap(e endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		// Answers carry queue contents and keys: no cache keeps them, no
		// browser guesses their type.
		sw.Header().Set("Cache-Control", "no-store")
		sw.Header().Set("X-Content-Type-Options", "nosniff")
		if e.pattern != streamPattern { // a stream bounds each of its lines instead
			r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		}
		var keyID string
		err := func() error {
			token, found := bearer(r.Header.Get("Authorization"))
			if !found {
				return &apiError{wire.CodeUnauthorized, wire.ReasonNoKey, "no access key: send Authorization: Bearer <key>"}
			}
			k, err := s.authenticate(r.Context(), token)
			if errors.Is(err, keys.ErrUnauthorized) {
				return errRevokedKey()
			}
			if err != nil {
				return err
			}
			keyID = k.ID
			ctx := context.WithValue(r.Context(), keyCtx{}, k)
			r = r.WithContext(ctx)
			if err := require(ctx, e.role, r.PathValue(e.scope)); err != nil {
				return err
			}
			held, err := s.holdRead(ctx, e.answer)
			if err != nil {
				return err
			}
			res, err := e.fn(r)
			if err != nil {
				s.answers.give(held)
				return err
			}
			if res.raw != nil {
				s.answers.give(held)
				res.raw.ServeHTTP(sw, r)
				return nil
			}
			if res.body == nil {
				s.answers.give(held)
				sw.WriteHeader(res.status)
			} else {
				s.writeAnswer(ctx, sw, res.status, res.body, e.answer, held)
			}
			return nil
		}()
		if err != nil {
			if e.pattern == streamPattern {
				// The stream's lines were not read: close the connection
				// rather than read them to their end before answering.
				sw.Header().Set("Connection", "close")
			}
			eb := errorBody(err)
			status := wire.Status(eb.Code)
			if status == http.StatusServiceUnavailable {
				sw.Header().Set("Retry-After", "1")
			}
			s.log.Log(r.Context(), failureLevel(r, status, eb.Reason), "broker: request failed",
				"method", r.Method, "path", r.URL.Path, "status", status, "key", keyID, "err", err)
			writeJSON(sw, status, wire.ErrorResponse{Error: eb})
		}
		s.log.Debug("broker: request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"key", keyID, "took", time.Since(start))
	})
}

// errRevokedKey is the answer to a key that is unknown or revoked.
func errRevokedKey() error {
	return &apiError{wire.CodeUnauthorized, wire.ReasonBadKey, "unknown or revoked access key"}
}

// bearer returns the token of an Authorization header value of the Bearer
// scheme, whose name is matched without regard to case (RFC 9110, 11.1).
func bearer(header string) (string, bool) {
	scheme, token, found := strings.Cut(header, " ")
	token = strings.TrimLeft(token, " ")
	return token, found && strings.EqualFold(scheme, "Bearer") && token != ""
}

// failureLevel is the log level of a failed request: an error of the broker
// or its store is an ERROR; a refusal that is the client's business (a
// long-poll over the limit, a client that went away, a draining broker, and
// every 4xx) is DEBUG, so that one client cannot fill the log.
func failureLevel(r *http.Request, status int, reason string) slog.Level {
	switch {
	case status < 500:
		return slog.LevelDebug
	case reason == wire.ReasonBusy || reason == wire.ReasonDraining || reason == wire.ReasonStandby:
		return slog.LevelDebug
	case r.Context().Err() != nil:
		return slog.LevelDebug // the client cancelled, or its connection closed
	case status == http.StatusServiceUnavailable:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// open serves the endpoints without a key (/healthz, /readyz, unknown
// paths).
func (s *Server) open(fn func(r *http.Request) (result, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := fn(r)
		if err != nil {
			eb := errorBody(err)
			writeJSON(w, wire.Status(eb.Code), wire.ErrorResponse{Error: eb})
			return
		}
		if res.raw != nil {
			res.raw.ServeHTTP(w, r)
			return
		}
		writeJSON(w, res.status, res.body)
	})
}

// noBody refuses a request that carries a body, for the endpoints that
// take none: what they would ignore is refused instead.
func noBody(r *http.Request) error {
	if r.Body == nil {
		return nil
	}
	var b [1]byte
	if n, _ := r.Body.Read(b[:]); n > 0 {
		return errMalformed("this endpoint takes no request body")
	}
	return nil
}

// hsts adds Strict-Transport-Security to every answer over TLS (ServeTLS,
// or a TLS server of the caller's around Handler): a browser that reached
// the broker over HTTPS (the dashboard) never falls back to plain HTTP,
// where its key would travel in clear. A year, as browsers' preload lists
// ask.
func hsts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.ServeHTTP(w, r)
	})
}

// ready answers 200 while the broker is not draining and the store answers.
func (s *Server) ready(r *http.Request) (result, error) {
	if s.drain.Err() != nil {
		return result{}, &apiError{wire.CodeUnavailable, wire.ReasonDraining, "broker is shutting down"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := s.st.Tx(ctx, func(tx *mqlite.Tx) error {
		var one int
		return tx.SQL().QueryRowContext(tx.Context(), `SELECT 1`).Scan(&one)
	})
	if err != nil {
		return result{}, err
	}
	return ok(wire.Health{Status: "ready"})
}
