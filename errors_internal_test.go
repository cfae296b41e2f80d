package mqlite

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/internal/errs"
)

// TestSentinelsMatchTheRoot: every exported sentinel of the root is declared
// as sentinel("text"), internal/errs has a constant of the same name and
// text and no other, and no two share a text. So each mqlite.ErrXxx is equal
// to the errs.ErrXxx that the engine and the schema wrap (errors.Is matches
// them) and to nothing else, and no sentinel can be missing or nil. The
// engine's InvalidArgumentError is the root's.
func TestSentinelsMatchTheRoot(t *testing.T) {
	t.Parallel()
	root := sentinelTexts(t, "errors.go", func(v ast.Expr) (string, bool) {
		call, ok := v.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return "", false
		}
		if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != "sentinel" {
			return "", false
		}
		return stringLit(call.Args[0])
	})
	internal := sentinelTexts(t, "internal/errs/errs.go", stringLit)
	if len(root) == 0 {
		t.Fatal("no sentinel found in errors.go")
	}
	for _, name := range slices.Sorted(maps.Keys(root)) {
		if got, ok := internal[name]; !ok {
			t.Errorf("internal/errs has no %s: add %s Sentinel = %q", name, name, root[name])
		} else if got != root[name] {
			t.Errorf("errs.%s is %q, mqlite.%s is %q: errors.Is would not match them", name, got, name, root[name])
		}
	}
	for name := range internal {
		if _, ok := root[name]; !ok {
			t.Errorf("errs.%s has no mqlite.%s: a caller could not match it", name, name)
		}
	}
	seen := map[string]string{}
	for name, text := range root {
		if other, ok := seen[text]; ok {
			t.Errorf("%s and %s share the text %q, so they are one error", name, other, text)
		}
		seen[text] = name
	}
	if errs.ErrLockLost != ErrLockLost || errors.Is(ErrLockLost, ErrClosed) {
		t.Errorf("errs.ErrLockLost %#v, mqlite.ErrLockLost %#v: equal to each other and to nothing else", errs.ErrLockLost, ErrLockLost)
	}

	err := errs.Invalidf(ErrInvalidTTL, "TTL %d", -1)
	var ia *InvalidArgumentError
	if !errors.As(err, &ia) || ia.Kind != ErrInvalidTTL || ia.Detail != "TTL -1" {
		t.Fatalf("errs.Invalidf: %#v, want an *InvalidArgumentError of ErrInvalidTTL", err)
	}
	if !errors.Is(err, ErrInvalidArgument) || !errors.Is(err, ErrInvalidTTL) {
		t.Fatalf("%v matches neither ErrInvalidArgument nor ErrInvalidTTL", err)
	}
}

// sentinelTexts parses the Go file path and returns the text of every
// exported var or const whose name starts with Err, as read by text; a
// declaration that text cannot read fails the test.
func sentinelTexts(t *testing.T, path string, text func(ast.Expr) (string, bool)) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || (gen.Tok != token.VAR && gen.Tok != token.CONST) {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Err") {
					continue
				}
				if i >= len(vs.Values) {
					t.Errorf("%s: %s has no value", path, name.Name)
					continue
				}
				s, ok := text(vs.Values[i])
				if !ok {
					t.Errorf("%s: %s is not declared as a sentinel of a literal text", path, name.Name)
					continue
				}
				out[name.Name] = s
			}
		}
	}
	return out
}

// stringLit returns the value of a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// TestAlreadySettledIsLockLost: ErrAlreadySettled matches ErrLockLost (a
// caller that rolls back on a lost lock rolls back on it too), and nothing
// else matches ErrAlreadySettled.
func TestAlreadySettledIsLockLost(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("complete 0: %w", errs.ErrAlreadySettled)
	if !errors.Is(wrapped, ErrLockLost) || !errors.Is(wrapped, ErrAlreadySettled) {
		t.Fatalf("%v: want it to match ErrAlreadySettled and ErrLockLost", wrapped)
	}
	if errors.Is(ErrLockLost, ErrAlreadySettled) || errors.Is(ErrClosed, ErrLockLost) {
		t.Fatal("ErrLockLost must not match ErrAlreadySettled, nor ErrClosed ErrLockLost")
	}
}
