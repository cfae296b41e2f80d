package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

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

// decode reads exactly one JSON value of type T from body: unknown fields,
// trailing data and bodies over the limit are refused.
func decode[T any](body io.Reader) (T, error) {
	var v T
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return v, &apiError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit)}
		}
		if errors.Is(err, io.EOF) {
			return v, errMalformed("empty request body")
		}
		return v, errMalformed("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return v, &apiError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit)}
		}
		return v, errMalformed("malformed JSON: data after the value")
	}
	return v, nil
}

// decodeBytes is decode on a byte slice (for the fuzz tests).
func decodeBytes[T any](b []byte) (T, error) { return decode[T](bytes.NewReader(b)) }

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody gives the response of err.
func errorBody(err error) wire.Error {
	var ae *apiError
	if errors.As(err, &ae) {
		return wire.Error{Code: ae.code, Reason: ae.reason, Message: ae.msg}
	}
	return *wire.ErrorOf(err)
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
// and the handler.
type endpoint struct {
	pattern string
	role    keys.Role
	scope   string
	fn      func(r *http.Request) (result, error)
}

// wrap runs an endpoint: body limit, authentication, authorisation, the
// handler, the response and the request log line.
func (s *Server) wrap(e endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		var keyID string
		err := func() error {
			token, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !found || token == "" {
				return &apiError{wire.CodeUnauthorized, wire.ReasonNoKey, "no access key: send Authorization: Bearer <key>"}
			}
			k, err := s.authenticate(r.Context(), token)
			if errors.Is(err, keys.ErrUnauthorized) {
				return &apiError{wire.CodeUnauthorized, wire.ReasonBadKey, "unknown or revoked access key"}
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
			res, err := e.fn(r)
			if err != nil {
				return err
			}
			if res.raw != nil {
				res.raw.ServeHTTP(sw, r)
				return nil
			}
			if res.body == nil {
				sw.WriteHeader(res.status)
			} else {
				writeJSON(sw, res.status, res.body)
			}
			return nil
		}()
		if err != nil {
			eb := errorBody(err)
			status := wire.Status(eb.Code)
			if status == http.StatusServiceUnavailable {
				sw.Header().Set("Retry-After", "1")
			}
			if status >= 500 {
				s.log.Error("broker: request failed", "method", r.Method, "path", r.URL.Path, "key", keyID, "err", err)
			}
			writeJSON(sw, status, wire.ErrorResponse{Error: eb})
		}
		s.log.Debug("broker: request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"key", keyID, "took", time.Since(start))
	})
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
