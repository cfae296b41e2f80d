package tracing

import (
	"context"
	"maps"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var (
	traceID, _ = trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _  = trace.SpanIDFromHex("00f067aa0ba902b7")
	state, _   = trace.ParseTraceState("vendor=opaque")
	sc         = trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, TraceState: state})
	parent     = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

func TestInject(t *testing.T) {
	t.Parallel()
	traced := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	tests := []struct {
		name  string
		ctx   context.Context
		props map[string]string
		max   int
		want  map[string]string
	}{
		{"no span", context.Background(), map[string]string{"a": "1"}, 1 << 10, map[string]string{"a": "1"}},
		{"span", traced, map[string]string{"a": "1"}, 1 << 10,
			map[string]string{"a": "1", Traceparent: parent, Tracestate: "vendor=opaque"}},
		{"nil properties", traced, nil, 1 << 10, map[string]string{Traceparent: parent, Tracestate: "vendor=opaque"}},
		{"the caller's own wins", traced, map[string]string{Traceparent: "mine"}, 1 << 10, map[string]string{Traceparent: "mine"}},
		{"over the limit", traced, map[string]string{"a": strings.Repeat("x", 100)}, 150, map[string]string{"a": strings.Repeat("x", 100)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := maps.Clone(tc.props)
			got := Inject(tc.ctx, tc.props, tc.max)
			if !maps.Equal(got, tc.want) {
				t.Errorf("Inject: %v, want %v", got, tc.want)
			}
			if !maps.Equal(tc.props, before) {
				t.Errorf("Inject changed the caller's map: %v, was %v", tc.props, before)
			}
		})
	}
}

func TestExtractAndHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		props map[string]string
		want  map[string]string // what Headers sets; nil: nothing, Extract invalid
	}{
		{"none", map[string]string{"a": "1"}, nil},
		{"traceparent", map[string]string{Traceparent: parent}, map[string]string{Traceparent: parent}},
		{"with tracestate", map[string]string{Traceparent: parent, Tracestate: "vendor=opaque"},
			map[string]string{Traceparent: parent, Tracestate: "vendor=opaque"}},
		{"malformed", map[string]string{Traceparent: "00-nothex-00f067aa0ba902b7-01"}, nil},
		{"all-zero trace id", map[string]string{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			Headers(tc.props, func(k, v string) { got[k] = v })
			if tc.want == nil {
				tc.want = map[string]string{}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("Headers: %v, want %v", got, tc.want)
			}
			if valid := Extract(tc.props).IsValid(); valid != (len(tc.want) > 0) {
				t.Errorf("Extract valid %v, want %v", valid, len(tc.want) > 0)
			}
		})
	}
}

func TestReplace(t *testing.T) {
	t.Parallel()
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	old := map[string]string{Traceparent: "00-11111111111111111111111111111111-2222222222222222-01", Tracestate: "old=1", "a": "1"}
	got := Replace(ctx, old, 1<<10)
	want := map[string]string{Traceparent: parent, Tracestate: "vendor=opaque", "a": "1"}
	if !maps.Equal(got, want) {
		t.Errorf("Replace: %v, want %v", got, want)
	}
	if old[Tracestate] != "old=1" {
		t.Error("Replace changed the caller's map")
	}
}

// TestTracer: tracing is off for a no-op provider and for the global one
// while unset (the test binary never sets it), on for an SDK provider.
func TestTracer(t *testing.T) {
	t.Parallel()
	sdk := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	tests := []struct {
		name string
		tp   trace.TracerProvider
		on   bool
	}{
		{"global unset", nil, false},
		{"global unset, given", otel.GetTracerProvider(), false},
		{"noop", noop.NewTracerProvider(), false},
		{"sdk", sdk, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if on := Tracer(tc.tp) != nil; on != tc.on {
				t.Errorf("Tracer on %v, want %v", on, tc.on)
			}
		})
	}
}

// TestOffAllocatesNothing: with tracing off, what the hot paths do per
// call (the check, and Inject on a ctx with no span) allocates nothing.
func TestOffAllocatesNothing(t *testing.T) {
	props := map[string]string{"a": "1"}
	ctx := context.Background()
	var src struct{}
	if n := testing.AllocsPerRun(1000, func() {
		if Tracer(nil) != nil || Of(src) != nil || Of(globalSource{}) != nil {
			t.Fatal("tracing on")
		}
		_ = Inject(ctx, props, 1<<10)
	}); n != 0 {
		t.Errorf("%v allocations per call with tracing off, want 0", n)
	}
}

// globalSource names the global provider, as a Store without
// Config.TracerProvider does.
type globalSource struct{}

func (globalSource) TracerProvider() trace.TracerProvider { return otel.GetTracerProvider() }
