package consumer_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// Tracing: with a tracer provider, the sender's trace travels in the
// message (its traceparent property) and Loop continues it around the
// handler. Here the spans go to an in-memory recorder; an application
// gives an exporting provider (OTLP, stdout) instead.
func Example_tracing() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp) // outbox.SendOne has no Store to ask: it follows the global provider
	defer otel.SetTracerProvider(prev)

	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil {
		log.Fatal(err)
	}

	// The request that places the order, and its transaction.
	reqCtx, req := tp.Tracer("shop").Start(ctx, "POST /orders")
	err = st.Tx(reqCtx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{Body: []byte("order-1")})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	req.End()

	loopCtx, stop := context.WithCancel(ctx)
	err = consumer.Loop(loopCtx, st, "orders", func(ctx context.Context, msg mqlite.Message) error {
		_, span := tp.Tracer("shop").Start(ctx, "charge card") // a child of the process span
		span.End()
		stop()
		return nil
	}, consumer.LoopConfig{})
	if err != nil {
		log.Fatal(err)
	}

	names := map[[8]byte]string{}
	for _, s := range rec.Ended() {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	var lines []string
	for _, s := range rec.Ended() {
		parent := names[s.Parent().SpanID()]
		if parent == "" {
			parent = "-"
		}
		same := s.SpanContext().TraceID() == req.SpanContext().TraceID()
		lines = append(lines, fmt.Sprintf("%-15s parent %-15s request's trace: %v", s.Name(), parent, same))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// POST /orders    parent -               request's trace: true
	// charge card     parent process orders  request's trace: true
	// complete orders parent process orders  request's trace: true
	// process orders  parent send orders     request's trace: true
	// receive orders  parent -               request's trace: false
	// send orders     parent POST /orders    request's trace: true
}
