package relay_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

// printSink is a Sink that prints each message with its stable id, and
// refuses the ones marked "bad".
type printSink struct{ done chan struct{} }

func (s printSink) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	out := make([]relay.Outcome, len(msgs))
	for i, m := range msgs {
		if string(m.Body) == "bad" {
			out[i] = relay.DeadLetter("print: refused", "the far side's answer")
			continue
		}
		fmt.Printf("%s %s\n", relay.ID(m), m.Body)
		if m.MessageID == "last" {
			close(s.done)
		}
	}
	return out
}

// A Sink needs one method; the Relay claims, renews, retries and
// dead-letters around it.
func ExampleNew() {
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
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{Ordering: mqlite.FIFO}); err != nil {
		log.Fatal(err)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "events", []outbox.Message{
			{Body: []byte("created")}, {Body: []byte("bad")}, {Body: []byte("paid"), MessageID: "last"},
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	sink := printSink{done: make(chan struct{})}
	r, err := relay.New(st, "events", sink, relay.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	<-sink.done
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	dead, err := st.PeekDeadLetters(ctx, "events", mqlite.PeekParams{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letter:", string(dead[0].Body), "-", dead[0].DeadLetterReason)
	// Output:
	// events:1 created
	// last paid
	// dead letter: bad - print: refused
}
