package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

var update = flag.Bool("update", false, "rewrite docs/openapi.json from the broker's document")

// goldenOpenAPI is the copy of the document for readers and client
// generators; TestOpenAPI keeps it equal to what the broker serves.
const goldenOpenAPI = "../docs/openapi.json"

// newTestServer is a broker on a fresh store, not listening.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	tb := testdb.Open(t, mqlite.Config{})
	s, err := New(Config{Store: tb.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// TestOpenAPI holds the OpenAPI document to the broker: it names exactly
// the routes of the route table (a route added without its operation fails
// here), every JSON field of every request and answer type, every error
// code and reason; the broker serves it without a key; docs/openapi.json
// is the same document (go test ./broker -run TestOpenAPI -update rewrites
// it).
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	s := newTestServer(t)
	raw, err := openAPI(s.eps)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}

	t.Run("routes", func(t *testing.T) {
		var want []string
		for _, e := range s.eps {
			want = append(want, e.pattern)
		}
		for p := range openRoutes {
			want = append(want, p)
		}
		var got []string
		for path, ops := range doc["paths"].(map[string]any) {
			for method := range ops.(map[string]any) {
				got = append(got, strings.ToUpper(method)+" "+path)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the document's operations:\n%v\nthe routes:\n%v", got, want)
		}
		// A route the operations do not know is refused, as is an
		// operation whose route went away.
		if _, err := openAPI(append(slices.Clone(s.eps), endpoint{pattern: "POST /v1/queues/{queue}/new"})); err == nil {
			t.Error("a route without its operation built a document")
		}
		if _, err := openAPI(s.eps[1:]); err == nil {
			t.Errorf("an operation without its route (%s) built a document", s.eps[0].pattern)
		}
	})

	t.Run("fields", func(t *testing.T) {
		for pattern, op := range operations {
			method, path, _ := strings.Cut(pattern, " ")
			o := doc["paths"].(map[string]any)[path].(map[string]any)[strings.ToLower(method)].(map[string]any)
			if op.in != nil {
				schema := dig(o, "requestBody", "content", "application/json", "schema")
				checkValue(t, doc, schema, filled(t, op.in), pattern+" request")
			}
			if op.out != nil {
				schema := dig(o, "responses", fmt.Sprint(op.status), "content", "application/json", "schema")
				checkValue(t, doc, schema, filled(t, op.out), pattern+" answer")
			}
		}
		// The error body, with every reason and code of the table.
		codes, reasons := wire.ErrorTable()
		errProps := dig(doc, "components", "schemas", "Error", "properties")
		for c := range codes {
			if !slices.Contains(dig(errProps, "code")["enum"].([]any), any(c)) {
				t.Errorf("code %s is not in the document", c)
			}
		}
		for _, r := range reasons {
			if !slices.Contains(dig(errProps, "reason")["enum"].([]any), any(r)) {
				t.Errorf("reason %s is not in the document", r)
			}
		}
		checkValue(t, doc, dig(doc, "components", "responses", "Error", "content", "application/json", "schema"),
			filled(t, wire.ErrorResponse{}), "error")
	})

	t.Run("served", func(t *testing.T) {
		srv := httptest.NewServer(s.handler)
		defer srv.Close()
		resp, err := http.Get(srv.URL + OpenAPIPath) // no key
		if err != nil {
			t.Fatal(err)
		}
		served, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", OpenAPIPath, resp.StatusCode, served)
		}
		var a, b bytes.Buffer
		if err := json.Compact(&a, served); err != nil {
			t.Fatal(err)
		}
		_ = json.Compact(&b, raw)
		if a.String() != b.String() {
			t.Error("the served document is not openAPI's")
		}
		if *update {
			if err := os.WriteFile(goldenOpenAPI, append(raw, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		golden, err := os.ReadFile(goldenOpenAPI)
		if err != nil {
			t.Fatal(err)
		}
		if string(golden) != string(raw)+"\n" {
			t.Errorf("%s is not the broker's document: run go test ./broker -run TestOpenAPI -update", goldenOpenAPI)
		}
	})
}

// dig follows keys through nested JSON objects.
func dig(v map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, ok := v[k].(map[string]any)
		if !ok {
			panic(fmt.Sprintf("no object %q in %v", k, keys))
		}
		v = next
	}
	return v
}

// filled encodes a value of v's type with every field set (so that no
// omitempty drops one), and decodes it back as generic JSON.
func filled(t *testing.T, v any) any {
	t.Helper()
	p := reflect.New(reflect.TypeOf(v))
	fill(p.Elem(), 0)
	b, err := json.Marshal(p.Interface())
	if err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// fill sets every field of v, to depth 6.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	t := v.Type()
	switch {
	case t == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.UnixMilli(1_700_000_000_000).UTC()))
		return
	case t == reflect.TypeOf(json.RawMessage{}):
		v.SetBytes([]byte(`{}`))
		return
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("x"))
			return
		}
		s := reflect.MakeSlice(t, 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(t)
		k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	}
}

// checkValue reports every part of the JSON value v that schema (resolved
// in doc) does not describe: a field missing from the properties, or a
// value of another type.
func checkValue(t *testing.T, doc map[string]any, schema map[string]any, v any, at string) {
	t.Helper()
	if ref, ok := schema["$ref"].(string); ok {
		schema = dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...)
	}
	if alts, ok := schema["anyOf"].([]any); ok {
		schema = alts[0].(map[string]any)
		checkValue(t, doc, schema, v, at)
		return
	}
	want, _ := schema["type"].(string)
	switch v := v.(type) {
	case map[string]any:
		if want == "" && len(schema) == 0 {
			return // any JSON (a json.RawMessage: a job's arguments)
		}
		if want != "object" {
			t.Errorf("%s: an object, the schema says %q", at, want)
			return
		}
		props, _ := schema["properties"].(map[string]any)
		extra, _ := schema["additionalProperties"].(map[string]any)
		for k, fv := range v {
			switch {
			case props != nil:
				ps, ok := props[k].(map[string]any)
				if !ok {
					t.Errorf("%s: field %q is not in the schema", at, k)
					continue
				}
				checkValue(t, doc, ps, fv, at+"."+k)
			case extra != nil:
				checkValue(t, doc, extra, fv, at+"["+k+"]")
			}
		}
	case []any:
		if want != "array" {
			t.Errorf("%s: an array, the schema says %q", at, want)
			return
		}
		for i, e := range v {
			checkValue(t, doc, schema["items"].(map[string]any), e, fmt.Sprintf("%s[%d]", at, i))
		}
	case string:
		if want != "string" && want != "" {
			t.Errorf("%s: a string, the schema says %q", at, want)
		}
	case float64:
		if want != "integer" && want != "number" && want != "" {
			t.Errorf("%s: a number, the schema says %q", at, want)
		}
	case bool:
		if want != "boolean" && want != "" {
			t.Errorf("%s: a boolean, the schema says %q", at, want)
		}
	}
}

// TestOpenAPIIsBuiltOnce: the OpenAPI document, open to any caller, is
// built once and then served as it is: a call takes a few allocations, not
// the thousands of a build. Every call used to build it again (10,923
// allocations), and four callers slowed every tenant's sends.
func TestOpenAPIIsBuiltOnce(t *testing.T) {
	s := newTestServer(t)
	get := func() {
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, OpenAPIPath, nil))
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", OpenAPIPath, w.Code)
		}
	}
	get() // the first call builds it
	n := testing.AllocsPerRun(20, get)
	t.Logf("%.0f allocations per call", n)
	if n > 100 {
		t.Fatalf("GET %s: %.0f allocations per call, want at most 100", OpenAPIPath, n)
	}
}
