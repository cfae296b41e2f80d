package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// moveCmd is "mqlite move": messages from one queue to another, each
// exactly once (consumer.CompleteWith: the onward copy and the completion
// in one commit, in the file or in one request to the broker).
func moveCmd(g *globals) *cobra.Command {
	var (
		max  int
		wait time.Duration
	)
	cmd := &cobra.Command{
		Use:   "move FROM TO",
		Short: "move messages from one queue to another (or a topic), each exactly once",
		Long: `move claims up to --max messages of FROM, waiting up to --wait for the first, and
moves each to TO (a queue or a topic) with its body, message id, group, subject
and properties: the copy in TO and the completion in FROM commit together, in
one transaction of the file or one request to the broker (POST /v1/commit), or
neither does. A message whose lease lapsed meanwhile stays in FROM, nothing
sent. Over the broker the key needs the consumer role on FROM and the producer
role on TO: a worker key scoped to both.`,
		Example: `  mqlite move orders.retry orders --max 100 --db app.db
  mqlite move orders orders.archive --url http://127.0.0.1:7420 --key $KEY`,
		ValidArgsFunction: g.completeQueues,
		Args:              exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, to := args[0], args[1]
			if max < 1 {
				return usagef("--max must be at least 1")
			}
			return g.with(cmd.Context(), func(b backend) error {
				msgs, err := b.Receive(cmd.Context(), from, mqlite.ReceiveOptions{Max: max, Wait: wait})
				if err != nil {
					return err
				}
				moved, err := moveAll(cmd.Context(), b, msgs, to)
				if err != nil {
					return err
				}
				return g.emit(map[string]any{"from": from, "to": to, "moved": moved}, func(w io.Writer) {
					fmt.Fprintf(w, "moved %d from %s to %s\n", moved, from, to)
				})
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&max, "max", 1, "how many messages at most")
	f.DurationVar(&wait, "wait", 0, "how long to wait for a first message")
	return cmd
}

// moveAll moves msgs to queue to, one commit each, and returns how many
// moved. It stops at the first failure, which names its message: those
// before it moved, it and those after stay locked in their queue until
// their lease ends.
func moveAll(ctx context.Context, b backend, msgs []mqlite.Message, to string) (int, error) {
	for i, m := range msgs {
		onward := outbox.Message{Body: m.Body, MessageID: m.MessageID, GroupID: m.GroupID,
			Subject: m.Subject, Properties: m.Properties, Priority: m.Priority}
		err := consumer.CompleteWith(ctx, b, m.Lock(), func(ctx context.Context, tx consumer.Tx) error {
			return tx.Send(ctx, to, onward)
		})
		if err != nil {
			return i, fmt.Errorf("move seq %d: %w", m.Seq, err)
		}
	}
	return len(msgs), nil
}
