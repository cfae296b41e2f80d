package relay_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// sliceSource is a Source that delivers its messages once, then waits;
// drained is closed when it has nothing left. It prints what it is told.
type sliceSource struct {
	msgs    []relay.Inbound
	drained chan struct{}
}

func (s *sliceSource) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	if len(s.msgs) == 0 {
		close(s.drained)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	n := min(max, len(s.msgs))
	out := s.msgs[:n]
	s.msgs = s.msgs[n:]
	return out, nil
}

func (s *sliceSource) Ack(_ context.Context, msgs []relay.Inbound) error {
	fmt.Println("acknowledged", len(msgs), "after the commit")
	return nil
}

func (s *sliceSource) Nack(context.Context, []relay.Inbound) error { return nil }

func (s *sliceSource) Redelivery() time.Duration { return 30 * time.Second }

// An Intake takes a Source's messages into a queue, each once by its id:
// a delivery again of a message (here order-1) is dropped by the queue's
// dedup window, which must outlast the source's redelivery and the
// intake's Outage.
func ExampleNewIntake() {
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
	if err := st.CreateQueue(ctx, "inbox", mqlite.QueueOptions{DedupWindow: 2 * time.Hour}); err != nil {
		log.Fatal(err)
	}
	msg := func(id string) relay.Inbound {
		return relay.Inbound{Message: outbox.Message{MessageID: id, Body: []byte("body of " + id)}}
	}
	src := &sliceSource{msgs: []relay.Inbound{msg("order-1"), msg("order-2"), msg("order-1")}, drained: make(chan struct{})}
	in, err := relay.NewIntake(st, "inbox", src, relay.IntakeConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(rctx) }()
	<-src.drained
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	stats, err := st.Stats(ctx, "inbox")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("in the queue:", stats.Total())
	// Output:
	// acknowledged 3 after the commit
	// in the queue: 2
}
