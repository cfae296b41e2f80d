package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/spf13/cobra"
)

func dlqCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "dead letters: list, redrive, purge",
		Example: `  mqlite dlq list orders --db app.db
  mqlite dlq redrive orders --url http://127.0.0.1:7420 --key $KEY`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("dlq needs a subcommand: list, redrive or purge")
		},
	}
	var opts mqlite.PeekParams
	list := &cobra.Command{
		Use:               "list QUEUE",
		ValidArgsFunction: g.completeQueues,
		Short:             "show the dead letters of a queue, with why",
		Example:           `  mqlite dlq list orders --db app.db`,
		Args:              exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				msgs, err := b.PeekDeadLetters(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				return g.emit(toJSON(msgs, ""), func(w io.Writer) { printMessages(w, msgs, true, "") })
			})
		},
	}
	list.Flags().Int64Var(&opts.FromSeq, "from", 0, "the first sequence number")
	list.Flags().IntVar(&opts.Max, "max", 100, "how many at most (up to 1000)")
	var seqs []int64
	redrive := &cobra.Command{
		Use:               "redrive QUEUE",
		Short:             "put dead letters back to active (all, or --seq ones)",
		Example:           `  mqlite dlq redrive orders --seq 12 --seq 15 --db app.db`,
		Args:              exactArgs(1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			seqs = slices.Compact(slices.Sorted(slices.Values(seqs)))
			return g.with(cmd.Context(), func(b backend) error {
				bar := g.bar(-1, "redriving", "messages")
				n, err := b.Redrive(cmd.Context(), args[0], mqlite.RedriveOptions{Seqs: seqs})
				_ = bar.Finish()
				if err != nil {
					return err
				}
				if n < len(seqs) {
					// Asked for by seq, and some were not there: say so (exit 1),
					// never a quiet "redrove 0".
					return fmt.Errorf("redrove %d of the %d seqs given: the others are not dead letters of queue %s: %w",
						n, len(seqs), args[0], mqlite.ErrMessageNotFound)
				}
				return g.emit(wire.CountResponse{Count: n}, func(w io.Writer) { fmt.Fprintf(w, "redrove %d dead letters\n", n) })
			})
		},
	}
	redrive.Flags().Int64SliceVar(&seqs, "seq", nil, "a dead letter's sequence number (repeat, or a comma list; default all)")
	var purgeYes bool
	var purgeSeqs []int64
	purge := yesFlag(&cobra.Command{
		Use:   "purge QUEUE",
		Short: "delete the dead letters of a queue (all, or --seq ones)",
		Example: `  mqlite dlq purge orders --yes --db app.db
  mqlite dlq purge orders --seq 12,15 --yes --db app.db`,
		Args:              exactArgs(1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			purgeSeqs = slices.Compact(slices.Sorted(slices.Values(purgeSeqs)))
			return g.with(cmd.Context(), func(b backend) error {
				s, err := b.Stats(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				what := fmt.Sprintf("delete the %d dead letters of queue %s", s.DeadLettered, args[0])
				if len(purgeSeqs) > 0 {
					what = fmt.Sprintf("delete the dead letters %s of queue %s", seqList(purgeSeqs), args[0])
				}
				if err := g.confirm(purgeYes, what); err != nil {
					return err
				}
				n, err := b.Purge(cmd.Context(), args[0], mqlite.PurgeOptions{State: mqlite.StateDeadLettered, Seqs: purgeSeqs})
				if err != nil {
					return err
				}
				if n < len(purgeSeqs) {
					return fmt.Errorf("purged %d of the %d seqs given: the others are not dead letters of queue %s: %w",
						n, len(purgeSeqs), args[0], mqlite.ErrMessageNotFound)
				}
				return g.emit(wire.CountResponse{Count: n}, func(w io.Writer) { fmt.Fprintf(w, "purged %d dead letters\n", n) })
			})
		},
	}, &purgeYes)
	purge.Flags().Int64SliceVar(&purgeSeqs, "seq", nil, "a dead letter's sequence number (repeat, or a comma list; default all)")
	cmd.AddCommand(list, redrive, purge)
	return cmd
}
