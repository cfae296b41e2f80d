package wire

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
)

// TestErrorsRoundTrip: every root sentinel, wrapped as the store wraps it,
// encodes to its code, reason and status, and decodes back to an error that
// matches the sentinel (and ErrInvalidArgument for the invalid ones).
func TestErrorsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range sentinels {
		if s.err == mqlite.ErrNilTx || s.err == mqlite.ErrNotAStore {
			continue // never reaches a client as itself
		}
		t.Run(s.reason, func(t *testing.T) {
			var err error = fmt.Errorf("op: %w", s.err)
			if s.code == CodeInvalid {
				err = &mqlite.InvalidArgumentError{Kind: s.err, Detail: "detail"}
			}
			e := ErrorOf(err)
			if e.Code != s.code || e.Reason != s.reason || Status(e.Code) != s.status {
				t.Fatalf("ErrorOf: %+v (status %d), want %s %s %d", e, Status(e.Code), s.code, s.reason, s.status)
			}
			back := e.Err()
			if !errors.Is(back, s.err) {
				t.Fatalf("Err() = %v does not match %v", back, s.err)
			}
			if s.code == CodeInvalid && !errors.Is(back, mqlite.ErrInvalidArgument) {
				t.Fatalf("Err() = %v does not match ErrInvalidArgument", back)
			}
		})
	}
}

func TestErrorOfOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		code   string
		status int
	}{
		{context.DeadlineExceeded, CodeUnavailable, http.StatusServiceUnavailable},
		{errors.New("disk on fire"), CodeInternal, http.StatusInternalServerError},
	} {
		if e := ErrorOf(tc.err); e.Code != tc.code || Status(e.Code) != tc.status {
			t.Errorf("ErrorOf(%v) = %+v", tc.err, e)
		}
	}
	if ErrorOf(nil) != nil || (*Error)(nil).Err() != nil {
		t.Error("nil must stay nil")
	}
	if Status("bogus") != 500 {
		t.Error("unknown code must be 500")
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ms   int64
		want int64 // ns
	}{{0, 0}, {1, 1e6}, {-1, -1}, {-7, -7e6}, {-1 << 62, -1 << 63}, {1 << 62, 1<<63 - 1}} {
		if got := MSDur(tc.ms); int64(got) != tc.want {
			t.Errorf("MSDur(%d) = %d, want %d", tc.ms, got, tc.want)
		}
	}
	if DurMS(-1) != -1 || DurMS(1500*1e6) != 1500 {
		t.Error("DurMS")
	}
}

// TestErrorTableHasEveryReason: every Reason constant of errors.go is in
// ErrorTable, so the broker's OpenAPI document names it.
func TestErrorTableHasEveryReason(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, reasons := ErrorTable()
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for i, name := range spec.(*ast.ValueSpec).Names {
				if !strings.HasPrefix(name.Name, "Reason") {
					continue
				}
				n++
				v, _ := strconv.Unquote(spec.(*ast.ValueSpec).Values[i].(*ast.BasicLit).Value)
				if !slices.Contains(reasons, v) {
					t.Errorf("%s (%q) is not in ErrorTable", name.Name, v)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d Reason constants", n)
	}
}
