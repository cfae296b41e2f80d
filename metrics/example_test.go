package metrics_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
)

// NewCollector exports an embedded store's per-queue counts; NewObserver
// times consumer.Loop's handlers. Serve the registry with promhttp.
func ExampleNewCollector() {
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}); err != nil {
		log.Fatal(err)
	}

	obs := metrics.NewObserver(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(st, nil), obs)
	// http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		for _, order := range []string{"order-1", "order-2"} {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "orders", outbox.Message{Body: []byte(order)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	handled := 0
	err = consumer.Loop(loopCtx, st, "orders", func(context.Context, mqlite.Message) error {
		if handled++; handled == 2 {
			stop()
		}
		return nil
	}, consumer.LoopConfig{Concurrency: 1, Observer: obs})
	if err != nil {
		log.Fatal(err)
	}

	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case "mqlite_queue_sent_total", "mqlite_queue_completed_total", "mqlite_loop_outcomes_total":
			for _, m := range f.GetMetric() {
				fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// mqlite_loop_outcomes_total completed 2
	// mqlite_queue_completed_total orders 2
	// mqlite_queue_sent_total orders 2
}
