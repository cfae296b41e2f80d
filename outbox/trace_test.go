package outbox_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestSendCarriesTraceContext: a send whose ctx carries a span context
// stores it in the message's properties as W3C Trace Context, with tracing
// off (no provider: the context came from elsewhere, an incoming request)
// as on; the caller's own traceparent wins, the limit on properties is
// kept, and the caller's map is not changed.
func TestSendCarriesTraceContext(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	big := strings.Repeat("x", mqlite.MaxPropertiesBytes-10)
	tests := []struct {
		name  string
		ctx   context.Context
		props map[string]string
		want  map[string]string
	}{
		{"no span", context.Background(), nil, nil},
		{"span", traced, nil, map[string]string{"traceparent": parent}},
		{"span beside properties", traced, map[string]string{"k": "v"}, map[string]string{"k": "v", "traceparent": parent}},
		{"the caller's traceparent", traced, map[string]string{"traceparent": "mine"}, map[string]string{"traceparent": "mine"}},
		{"no room left", traced, map[string]string{"k": big}, map[string]string{"k": big}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Options{})
			b.Queue(t, "q", mqlite.QueueOptions{})
			before := maps.Clone(tc.props)
			var seqs []int64
			err := b.Store.Tx(tc.ctx, func(tx *mqlite.Tx) error {
				one, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("one"), Properties: tc.props})
				if err != nil {
					return err
				}
				res, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", []outbox.Message{{Body: []byte("two"), Properties: tc.props}})
				if err == nil {
					seqs = []int64{one, res[0].Seq}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, seq := range seqs {
				if got := readMessage(t, b.Store.DB(), seq).Properties; !maps.Equal(got, tc.want) {
					t.Errorf("seq %d properties %v, want %v", seq, got, tc.want)
				}
			}
			if !maps.Equal(tc.props, before) {
				t.Errorf("the caller's properties changed: %v, were %v", tc.props, before)
			}
		})
	}
}
