package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

// queueFlags binds the flags of QueueOptions.
func queueFlags(f *pflag.FlagSet, o *mqlite.QueueOptions, fifo *bool) {
	f.IntVar(&o.MaxDeliveryCount, "max-delivery", 0, "deliveries before dead-lettering (default 10)")
	f.DurationVar(&o.LockDuration, "lock", 0, "the lease of a delivery (default 30s)")
	f.DurationVar(&o.DedupWindow, "dedup-window", 0, "how long message ids are remembered (default 10m; -1ns turns it off)")
	f.BoolVar(fifo, "fifo", false, "a FIFO queue: one message at a time, in order")
	f.DurationVar(&o.DefaultTTL, "ttl", 0, "the time to live of messages sent without one (default none)")
	f.BoolVar(&o.DeadLetterOnExpire, "dead-letter-on-expire", false, "dead-letter expired messages instead of deleting them")
	f.BoolVar(&o.DedupByBody, "dedup-by-body", false, "deduplicate messages sent without a message id by their body, inside the dedup window")
	f.DurationVar(&o.DLQ.MaxAge, "dlq-max-age", 0, "how long dead letters are kept (default 14 days)")
	f.IntVar(&o.DLQ.MaxCount, "dlq-max-count", 0, "how many dead letters are kept (default 100000; -1 no bound)")
	f.Int64Var(&o.DLQ.MaxBytes, "dlq-max-bytes", 0, "how many bytes of dead letters are kept (default 256 MiB; -1 no bound)")
}

func printQueues(w io.Writer, qs []mqlite.QueueInfo) {
	fmt.Fprintln(w, "NAME\tORDERING\tMAX DELIVERY\tLOCK\tDEDUP WINDOW\tDEDUP BY BODY\tCREATED\tPAUSED")
	for _, q := range qs {
		o := q.Options
		paused := "-"
		if q.Paused() {
			paused = q.PausedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%v\t%v\t%v\t%s\t%s\n", q.Name, o.Ordering, o.MaxDeliveryCount, o.LockDuration, o.DedupWindow,
			o.DedupByBody, q.CreatedAt.Format(time.RFC3339), paused)
	}
}

func queuesCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use: "list", Short: "list the queues", Args: noArgs,
		Example: `  mqlite queues list --db app.db`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				qs, err := b.ListQueues(cmd.Context())
				if err != nil {
					return err
				}
				out := wire.QueuesResponse{Queues: []wire.QueueInfo{}}
				for _, q := range qs {
					out.Queues = append(out.Queues, wire.FromQueueInfo(q))
				}
				return g.emit(out, func(w io.Writer) { printQueues(w, qs) })
			})
		},
	}
	set := func(use, short, example string, update bool) *cobra.Command {
		var o mqlite.QueueOptions
		var fifo bool
		cmd := &cobra.Command{
			Use: use + " NAME", Short: short, Example: example, Args: exactArgs(1),
			ValidArgsFunction: g.completeQueues,
			RunE: func(cmd *cobra.Command, args []string) error {
				if fifo {
					o.Ordering = mqlite.FIFO
				}
				with := g.withCreate
				if update {
					with = g.with
				}
				return with(cmd.Context(), func(b backend) error {
					var err error
					if update {
						err = updateQueue(cmd, b, args[0], &o)
					} else {
						err = b.CreateQueue(cmd.Context(), args[0], o)
					}
					if err != nil {
						return err
					}
					q, err := b.GetQueue(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					return g.emit(wire.FromQueueInfo(q), func(w io.Writer) { printQueues(w, []mqlite.QueueInfo{q}) })
				})
			},
		}
		queueFlags(cmd.Flags(), &o, &fifo)
		return cmd
	}
	var delYes bool
	del := yesFlag(&cobra.Command{
		Use: "delete NAME", Short: "delete a queue and every message in it", Args: exactArgs(1),
		Example:           `  mqlite queues delete orders --yes --db app.db`,
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				s, err := b.Stats(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if err := g.confirm(delYes, fmt.Sprintf("delete queue %s and its %d messages", args[0], total(s))); err != nil {
					return err
				}
				if err := b.DeleteQueue(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"deleted": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "deleted queue %s\n", args[0]) })
			})
		},
	}, &delYes)
	pause := func(use, short string, resume bool) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: exactArgs(1),
			Example:           "  mqlite queues " + use + " orders --db app.db",
			ValidArgsFunction: g.completeQueues,
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.with(cmd.Context(), func(b backend) error {
					set := b.PauseQueue
					if resume {
						set = b.ResumeQueue
					}
					if err := set(cmd.Context(), args[0]); err != nil {
						return err
					}
					q, err := b.GetQueue(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					return g.emit(wire.FromQueueInfo(q), func(w io.Writer) { printQueues(w, []mqlite.QueueInfo{q}) })
				})
			},
		}
	}
	return withExample(`  mqlite queues list --db app.db
  mqlite queues create orders --fifo --url http://127.0.0.1:7420 --key $KEY`, group("queues", "queues: list, create, update, pause, resume, purge, delete", list,
		set("create", "create a queue", `  mqlite queues create orders --max-delivery 5 --lock 1m --db app.db`, false),
		set("update", "change a queue's options: only the flags given, the others stay", `  mqlite queues update orders --lock 2m --db app.db`, true),
		pause("pause", "pause a queue: sends are accepted, receives get nothing until it resumes", false),
		pause("resume", "resume a paused queue", true),
		purgeCmd(g), del))
}

// total is how many messages s counts, dead letters included.
func total(s mqlite.QueueStats) int64 {
	return s.Active + s.Scheduled + s.Locked + s.Deferred + s.DeadLettered
}

// queueFlagFields copies the option of each flag of queueFlags from src to
// dst: update applies only the flags given on the command line.
var queueFlagFields = map[string]func(dst, src *mqlite.QueueOptions){
	"max-delivery":          func(d, s *mqlite.QueueOptions) { d.MaxDeliveryCount = s.MaxDeliveryCount },
	"lock":                  func(d, s *mqlite.QueueOptions) { d.LockDuration = s.LockDuration },
	"dedup-window":          func(d, s *mqlite.QueueOptions) { d.DedupWindow = s.DedupWindow },
	"fifo":                  func(d, s *mqlite.QueueOptions) { d.Ordering = s.Ordering },
	"ttl":                   func(d, s *mqlite.QueueOptions) { d.DefaultTTL = s.DefaultTTL },
	"dead-letter-on-expire": func(d, s *mqlite.QueueOptions) { d.DeadLetterOnExpire = s.DeadLetterOnExpire },
	"dedup-by-body":         func(d, s *mqlite.QueueOptions) { d.DedupByBody = s.DedupByBody },
	"dlq-max-age":           func(d, s *mqlite.QueueOptions) { d.DLQ.MaxAge = s.DLQ.MaxAge },
	"dlq-max-count":         func(d, s *mqlite.QueueOptions) { d.DLQ.MaxCount = s.DLQ.MaxCount },
	"dlq-max-bytes":         func(d, s *mqlite.QueueOptions) { d.DLQ.MaxBytes = s.DLQ.MaxBytes },
}

// updateQueue reads the queue's options, applies the flags given (o holds
// their values) and writes them back: an option not given keeps its value.
func updateQueue(cmd *cobra.Command, b backend, name string, o *mqlite.QueueOptions) error {
	q, err := b.GetQueue(cmd.Context(), name)
	if err != nil {
		return err
	}
	opts := q.Options
	var missing []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			return
		}
		if apply, ok := queueFlagFields[f.Name]; ok {
			apply(&opts, o)
		} else {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("internal: no queue option for --%s", strings.Join(missing, ", --"))
	}
	return b.UpdateQueue(cmd.Context(), name, opts)
}

// purgeStates are the states queues purge empties by default: all.
var purgeStates = []string{string(mqlite.StateActive), string(mqlite.StateScheduled), string(mqlite.StateDeferred),
	string(mqlite.StateLocked), string(mqlite.StateDeadLettered)}

func purgeCmd(g *globals) *cobra.Command {
	var (
		states []string
		seqs   []int64
		yes    bool
	)
	cmd := &cobra.Command{
		Use:   "purge NAME",
		Short: "delete the messages of a queue (every state, or --state ones; all, or --seq ones); the queue stays",
		Long: `purge deletes the messages of the queue NAME in the states --state names (all
by default: active, scheduled, deferred, locked, dead_lettered), or only the
--seq ones among them. Purging locked messages takes them from under their
consumers, whose settlements then fail. A --seq that is no message of the
queue in those states fails the command (exit 1), after the others went.
It asks first on a terminal; elsewhere it needs --yes.`,
		Example: `  mqlite queues purge orders --yes --db app.db
  mqlite queues purge orders --seq 12,15 --yes --db app.db
  mqlite queues purge orders --state active --state scheduled --yes --url http://127.0.0.1:7420 --key $KEY`,
		Args:              exactArgs(1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, st := range states {
				if !slices.Contains(purgeStates, st) {
					return usagef("--state %q: want one of %s", st, strings.Join(purgeStates, ", "))
				}
			}
			seqs = slices.Compact(slices.Sorted(slices.Values(seqs)))
			return g.with(cmd.Context(), func(b backend) error {
				s, err := b.Stats(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				count := map[string]int64{"active": s.Active, "scheduled": s.Scheduled, "deferred": s.Deferred,
					"locked": s.Locked, "dead_lettered": s.DeadLettered}
				var n int64
				for _, st := range states {
					n += count[st]
				}
				what := fmt.Sprintf("purge %d messages (%s) of queue %s", n, strings.Join(states, ", "), args[0])
				if len(seqs) > 0 {
					what = fmt.Sprintf("purge the messages %s (%s) of queue %s", seqList(seqs), strings.Join(states, ", "), args[0])
				}
				if err := g.confirm(yes, what); err != nil {
					return err
				}
				purged := map[string]int{}
				sum := 0
				for _, st := range states {
					k, err := b.Purge(cmd.Context(), args[0], mqlite.PurgeOptions{State: mqlite.State(st), Seqs: seqs})
					purged[st], sum = k, sum+k
					if err != nil {
						return fmt.Errorf("purge %s messages (%d purged so far): %w", st, sum, err)
					}
				}
				if sum < len(seqs) {
					return fmt.Errorf("purged %d of the %d seqs given: the others are not messages of queue %s in the states %s: %w",
						sum, len(seqs), args[0], strings.Join(states, ", "), mqlite.ErrMessageNotFound)
				}
				return g.emit(map[string]any{"queue": args[0], "purged": purged, "count": sum}, func(w io.Writer) {
					fmt.Fprintf(w, "purged %d messages of queue %s\n", sum, args[0])
				})
			})
		},
	}
	cmd.Flags().StringArrayVar(&states, "state", purgeStates, "purge only messages in this `state` (repeat)")
	cmd.Flags().Int64SliceVar(&seqs, "seq", nil, "purge only the message of this sequence number (repeat, or a comma list; default all)")
	return yesFlag(cmd, &yes)
}

// seqList shows seqs for a question: "seq 12" or "seqs 12, 15".
func seqList(seqs []int64) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = strconv.FormatInt(s, 10)
	}
	if len(seqs) == 1 {
		return "seq " + parts[0]
	}
	return "seqs " + strings.Join(parts, ", ")
}

func statsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "stats [QUEUE]", Short: "count the messages of a queue (or of every queue) per state",
		Example:           `  mqlite stats orders --db app.db`,
		Args:              rangeArgs(0, 1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				names := args
				if len(names) == 0 {
					qs, err := b.ListQueues(cmd.Context())
					if err != nil {
						return err
					}
					for _, q := range qs {
						names = append(names, q.Name)
					}
				}
				var all []wire.Stats
				for _, n := range names {
					s, err := b.Stats(cmd.Context(), n)
					if err != nil {
						return err
					}
					all = append(all, wire.FromStats(s))
				}
				var v any = all
				if len(args) == 1 {
					v = all[0]
				}
				return g.emit(v, func(w io.Writer) {
					fmt.Fprintln(w, "QUEUE\tACTIVE\tSCHEDULED\tLOCKED\tDEFERRED\tDEAD\tBYTES\tOLDEST\tOLDEST DEAD\tCONSUMERS")
					for _, s := range all {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%v\t%d\n", s.Queue, s.Active, s.Scheduled, s.Locked, s.Deferred,
							s.DeadLettered, s.Bytes, time.Duration(s.OldestAgeMS)*time.Millisecond,
							time.Duration(s.OldestDeadLetterAgeMS)*time.Millisecond, s.ReceiversTotal)
					}
					if len(all) == 1 && len(all[0].Receivers) > 0 {
						fmt.Fprintln(w)
						printReceivers(w, all[0].Receivers)
					}
				})
			})
		},
	}
}

// printReceivers lists the receivers of one queue: who, how many receives
// wait, how many leases they hold, when last seen.
func printReceivers(w io.Writer, rs []wire.Receiver) {
	fmt.Fprintln(w, "RECEIVER\tKEY\tADDRESS\tWAITING\tLOCKS\tLAST SEEN")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", dash(r.Name), dash(r.KeyID), dash(r.Addr), r.Waiting, r.Locks,
			r.LastSeen.UTC().Format(time.RFC3339))
	}
}

// dash is s, or "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
