package outbox_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// TestSendCarriesTraceContext: with tracing on, SendOne and SendBatch
// record a send span, child of ctx's, and store its context in each
// message's properties as W3C Trace Context; the caller's own traceparent
// wins, the limit on properties is kept, and the caller's map is not
// changed. With tracing off nothing is added. It sets the global tracer
// provider (outbox has no Store to ask for one), so it does not run in
// parallel.
func TestSendCarriesTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prev := otel.GetTracerProvider()
	big := strings.Repeat("x", mqlite.MaxPropertiesBytes-10)
	tests := []struct {
		name  string
		on    bool
		props map[string]string
		want  func(traceparent string) map[string]string
	}{
		{"off", false, map[string]string{"k": "v"}, func(string) map[string]string { return map[string]string{"k": "v"} }},
		{"on", true, nil, func(tp string) map[string]string { return map[string]string{"traceparent": tp} }},
		{"on beside properties", true, map[string]string{"k": "v"},
			func(tp string) map[string]string { return map[string]string{"k": "v", "traceparent": tp} }},
		{"the caller's traceparent", true, map[string]string{"traceparent": "mine"},
			func(string) map[string]string { return map[string]string{"traceparent": "mine"} }},
		{"no room left", true, map[string]string{"k": big}, func(string) map[string]string { return map[string]string{"k": big} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.on {
				otel.SetTracerProvider(tp)
				defer otel.SetTracerProvider(prev)
			}
			b := testdb.Open(t, mqlite.Config{})
			b.Queue(t, "q", mqlite.QueueOptions{})
			before := maps.Clone(tc.props)
			ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
			defer caller.End()
			var seqs []int64
			err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
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
			sends := map[int64]string{} // seq: the traceparent of its send span
			for _, s := range rec.Ended() {
				if s.Name() != "send q" || s.Parent().SpanID() != caller.SpanContext().SpanID() {
					continue
				}
				for _, a := range s.Attributes() {
					if a.Key == "messaging.mqlite.message.seq" {
						sends[a.Value.AsInt64()] = "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
					}
				}
			}
			for _, seq := range seqs {
				if tc.on && sends[seq] == "" {
					t.Errorf("no send span of seq %d, child of the caller's", seq)
				}
				if got, want := readMessage(t, b.Store.DB(), seq).Properties, tc.want(sends[seq]); !maps.Equal(got, want) {
					t.Errorf("seq %d properties %v, want %v", seq, got, want)
				}
			}
			if !maps.Equal(tc.props, before) {
				t.Errorf("the caller's properties changed: %v, were %v", tc.props, before)
			}
		})
	}
}
