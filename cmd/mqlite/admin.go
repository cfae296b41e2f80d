package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/wire"
)

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("%s needs a subcommand; run '%s --help'", cmd.CommandPath(), cmd.CommandPath())
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// withExample sets cmd's example and returns it.
func withExample(example string, cmd *cobra.Command) *cobra.Command {
	cmd.Example = example
	return cmd
}

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
			return g.with(cmd.Context(), func(b backend) error {
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
		yes    bool
	)
	cmd := &cobra.Command{
		Use:   "purge NAME",
		Short: "delete the messages of a queue (every state, or --state ones); the queue stays",
		Long: `purge deletes the messages of the queue NAME in the states --state names (all
by default: active, scheduled, deferred, locked, dead_lettered). Purging locked
messages takes them from under their consumers, whose settlements then fail.
It asks first on a terminal; elsewhere it needs --yes.`,
		Example: `  mqlite queues purge orders --yes --db app.db
  mqlite queues purge orders --state active --state scheduled --yes --url http://127.0.0.1:7420 --key $KEY`,
		Args:              exactArgs(1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, st := range states {
				if !slices.Contains(purgeStates, st) {
					return usagef("--state %q: want one of %s", st, strings.Join(purgeStates, ", "))
				}
			}
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
				if err := g.confirm(yes, fmt.Sprintf("purge %d messages (%s) of queue %s", n, strings.Join(states, ", "), args[0])); err != nil {
					return err
				}
				purged := map[string]int{}
				sum := 0
				for _, st := range states {
					k, err := b.Purge(cmd.Context(), args[0], mqlite.PurgeOptions{State: mqlite.State(st)})
					purged[st], sum = k, sum+k
					if err != nil {
						return fmt.Errorf("purge %s messages (%d purged so far): %w", st, sum, err)
					}
				}
				return g.emit(map[string]any{"queue": args[0], "purged": purged, "count": sum}, func(w io.Writer) {
					fmt.Fprintf(w, "purged %d messages of queue %s\n", sum, args[0])
				})
			})
		},
	}
	cmd.Flags().StringArrayVar(&states, "state", purgeStates, "purge only messages in this `state` (repeat)")
	return yesFlag(cmd, &yes)
}

func printTopics(w io.Writer, ts []mqlite.TopicInfo) {
	fmt.Fprintln(w, "TOPIC\tSUBSCRIPTION\tFILTER")
	for _, t := range ts {
		if len(t.Subscriptions) == 0 {
			fmt.Fprintf(w, "%s\t-\t\n", t.Name)
		}
		for _, s := range t.Subscriptions {
			fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, s.Queue, filterText(s.Filter))
		}
	}
}

func filterText(f mqlite.Filter) string {
	var parts []string
	if f.Subject != "" {
		parts = append(parts, "subject="+f.Subject)
	}
	if f.SubjectPrefix != "" {
		parts = append(parts, "subject^="+f.SubjectPrefix)
	}
	for k, m := range f.Properties {
		if m.Prefix != "" {
			parts = append(parts, k+"^="+m.Prefix)
		} else {
			parts = append(parts, k+" in "+strings.Join(m.In, ","))
		}
	}
	if len(parts) == 0 {
		return "(all)"
	}
	return strings.Join(parts, " and ")
}

func topicsCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use: "list", Short: "list the topics and their subscriptions", Args: noArgs,
		Example: `  mqlite topics list --db app.db`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				ts, err := b.ListTopics(cmd.Context())
				if err != nil {
					return err
				}
				out := wire.TopicsResponse{Topics: []wire.Topic{}}
				for _, t := range ts {
					out.Topics = append(out.Topics, wire.FromTopic(t))
				}
				return g.emit(out, func(w io.Writer) { printTopics(w, ts) })
			})
		},
	}
	create := &cobra.Command{
		Use: "create NAME", Short: "create a topic", Args: exactArgs(1),
		Example: `  mqlite topics create events --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withCreate(cmd.Context(), func(b backend) error {
				if err := b.CreateTopic(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"created": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "created topic %s\n", args[0]) })
			})
		},
	}
	var delYes bool
	del := yesFlag(&cobra.Command{
		Use: "delete NAME", Short: "delete a topic and all its subscriptions", Args: exactArgs(1),
		Example: `  mqlite topics delete events --yes --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				t, err := b.GetTopic(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if err := g.confirm(delYes, fmt.Sprintf("delete topic %s and its %d subscriptions", args[0], len(t.Subscriptions))); err != nil {
					return err
				}
				if err := b.DeleteTopic(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"deleted": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "deleted topic %s\n", args[0]) })
			})
		},
	}, &delYes)
	return withExample(`  mqlite topics create events --db app.db
  mqlite topics list --json --db app.db`, group("topics", "topics: list, create, delete", list, create, del))
}

// filterFlags binds the flags of a subscription Filter.
type filterFlags struct {
	subject, prefix []string
	in, propPrefix  []string
	unset           []string // update only
}

func (ff *filterFlags) bind(f *pflag.FlagSet) {
	f.StringArrayVar(&ff.subject, "subject", nil, "only messages with this subject")
	f.StringArrayVar(&ff.prefix, "subject-prefix", nil, "only messages whose subject starts so")
	f.StringArrayVar(&ff.in, "prop", nil, "only messages whose property `key=v1,v2` is one of the values (repeat)")
	f.StringArrayVar(&ff.propPrefix, "prop-prefix", nil, "only messages whose property `key=prefix` starts so (repeat)")
}

func (ff *filterFlags) filter() (mqlite.Filter, error) {
	var f mqlite.Filter
	if len(ff.subject) > 1 || len(ff.prefix) > 1 {
		return f, usagef("--subject and --subject-prefix take one value each")
	}
	if len(ff.subject) == 1 {
		f.Subject = ff.subject[0]
	}
	if len(ff.prefix) == 1 {
		f.SubjectPrefix = ff.prefix[0]
	}
	for _, c := range []struct {
		vals  []string
		match func(v string) mqlite.Match
	}{
		{ff.in, func(v string) mqlite.Match { return mqlite.In(strings.Split(v, ",")...) }},
		{ff.propPrefix, mqlite.Prefix},
	} {
		for _, p := range c.vals {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				return f, usagef("%q: want key=value", p)
			}
			if f.Properties == nil {
				f.Properties = map[string]mqlite.Match{}
			}
			f.Properties[k] = c.match(v)
		}
	}
	return f, nil
}

// apply changes cur by the filter flags given in fs: --subject and
// --subject-prefix replace theirs, --prop and --prop-prefix set their keys,
// --unset-prop removes keys; what no flag names stays.
func (ff *filterFlags) apply(fs *pflag.FlagSet, cur mqlite.Filter) (mqlite.Filter, error) {
	given, err := ff.filter()
	if err != nil {
		return cur, err
	}
	if fs.Changed("subject") {
		cur.Subject = given.Subject
	}
	if fs.Changed("subject-prefix") {
		cur.SubjectPrefix = given.SubjectPrefix
	}
	props := maps.Clone(cur.Properties)
	if props == nil {
		props = map[string]mqlite.Match{}
	}
	maps.Copy(props, given.Properties)
	for _, k := range ff.unset {
		delete(props, k)
	}
	cur.Properties = props
	if len(props) == 0 {
		cur.Properties = nil
	}
	return cur, nil
}

func subscriptionsCmd(g *globals) *cobra.Command {
	var cff, uff filterFlags
	var o mqlite.QueueOptions
	var fifo bool
	create := &cobra.Command{
		Use: "create TOPIC QUEUE", Short: "subscribe a new queue to a topic, with a filter", Args: exactArgs(2),
		Example: `  mqlite subscriptions create events mailer --subject-prefix order. --prop region=eu,uk --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := cff.filter()
			if err != nil {
				return err
			}
			if fifo {
				o.Ordering = mqlite.FIFO
			}
			return g.with(cmd.Context(), func(b backend) error {
				if err := b.CreateSubscription(cmd.Context(), args[0], args[1], mqlite.SubscriptionOptions{Filter: f, Queue: o}); err != nil {
					return err
				}
				return g.showTopic(cmd, b, args[0])
			})
		},
	}
	cff.bind(create.Flags())
	queueFlags(create.Flags(), &o, &fifo)
	update := &cobra.Command{
		Use: "update TOPIC QUEUE", Short: "change a subscription's filter: only the parts given, the others stay", Args: exactArgs(2),
		Long: `update changes the filter of the subscription of QUEUE to TOPIC: --subject and
--subject-prefix replace those parts (an empty value removes one), each --prop
and --prop-prefix sets that property's match, and --unset-prop removes one.
The parts not named stay as they are.`,
		Example: `  mqlite subscriptions update events mailer --subject order.paid --db app.db
  mqlite subscriptions update events mailer --unset-prop region --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				t, err := b.GetTopic(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				i := slices.IndexFunc(t.Subscriptions, func(s mqlite.SubscriptionInfo) bool { return s.Queue == args[1] })
				if i < 0 {
					return fmt.Errorf("topic %s has no subscription %s: %w", args[0], args[1], mqlite.ErrSubscriptionNotFound)
				}
				f, err := uff.apply(cmd.Flags(), t.Subscriptions[i].Filter)
				if err != nil {
					return err
				}
				if err := b.UpdateSubscription(cmd.Context(), args[0], args[1], f); err != nil {
					return err
				}
				return g.showTopic(cmd, b, args[0])
			})
		},
	}
	uff.bind(update.Flags())
	update.Flags().StringArrayVar(&uff.unset, "unset-prop", nil, "remove the match of this property `key` (repeat)")
	del := &cobra.Command{
		Use: "delete TOPIC QUEUE", Short: "remove a subscription and its queue", Args: exactArgs(2),
		Example: `  mqlite subscriptions delete events mailer --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				if err := b.DeleteSubscription(cmd.Context(), args[0], args[1]); err != nil {
					return err
				}
				return g.showTopic(cmd, b, args[0])
			})
		},
	}
	return withExample(`  mqlite subscriptions create events ledger --subject order.paid --db app.db
  mqlite subscriptions delete events ledger --db app.db`, group("subscriptions", "subscriptions of topics: create, update, delete", create, update, del))
}

func (g *globals) showTopic(cmd *cobra.Command, b backend, name string) error {
	t, err := b.GetTopic(cmd.Context(), name)
	if err != nil {
		return err
	}
	return g.emit(wire.FromTopic(t), func(w io.Writer) { printTopics(w, []mqlite.TopicInfo{t}) })
}

func statsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "stats [QUEUE]", Short: "count the messages of a queue (or of every queue) per state",
		Example:           `  mqlite stats orders --db app.db`,
		Args:              rangeArgs(0, 1),
		ValidArgsFunction: g.completeQueues,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
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

func printKeys(w io.Writer, ks []client.Key) {
	fmt.Fprintln(w, "ID\tROLE\tQUEUES\tCREATED\tREVOKED")
	for _, k := range ks {
		rev := "-"
		if !k.RevokedAt.IsZero() {
			rev = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Role, strings.Join(k.Queues, ","), k.CreatedAt.Format(time.RFC3339), rev)
	}
}

func keysCmd(g *globals) *cobra.Command {
	var role string
	var queues []string
	create := &cobra.Command{
		Use: "create", Short: "make an access key; its secret is printed once", Args: noArgs,
		Long: `create makes an access key for the broker. The secret is printed once, alone on
stdout (the key's id and scope go to stderr; --json prints one object), and
only its hash is kept: store it now. Roles: producer (send), consumer (receive,
settle, peek, stats), admin (everything). --queue limits the key to queues
and topics by name; "*" is all of them.`,
		Example: `  KEY=$(mqlite keys create --role admin --queue '*' --db app.db)
  mqlite keys create --role consumer --queue orders --url http://127.0.0.1:7420 --key $ADMIN_KEY`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if role == "" || len(queues) == 0 {
				return usagef("keys create needs --role and --queue")
			}
			return g.withCreate(cmd.Context(), func(b backend) error {
				k, secret, err := b.CreateKey(cmd.Context(), role, queues)
				if err != nil {
					return err
				}
				if g.json {
					return g.writeJSON(wire.CreateKeyResponse{Key: wire.Key(k), Secret: secret})
				}
				// Only the secret on stdout, so that KEY=$(mqlite keys create ...)
				// captures it alone; the rest is for the person at the terminal.
				fmt.Fprintf(g.stderr, "created key %s (%s on %s); its secret, on stdout, is shown once: store it now\n",
					k.ID, k.Role, strings.Join(k.Queues, ","))
				_, err = fmt.Fprintln(g.stdout, secret)
				return err
			})
		},
	}
	create.Flags().StringVar(&role, "role", "", "producer, consumer or admin")
	create.Flags().StringArrayVar(&queues, "queue", nil, "a queue or topic the key covers, or * for all (repeat)")
	list := &cobra.Command{
		Use: "list", Short: "list the access keys (never their secrets)", Args: noArgs,
		Example: `  mqlite keys list --db app.db`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				ks, err := b.ListKeys(cmd.Context())
				if err != nil {
					return err
				}
				out := wire.KeysResponse{Keys: make([]wire.Key, len(ks))}
				for i, k := range ks {
					out.Keys[i] = wire.Key(k)
				}
				return g.emit(out, func(w io.Writer) { printKeys(w, ks) })
			})
		},
	}
	var revokeYes bool
	revoke := yesFlag(&cobra.Command{
		Use: "revoke ID", Short: "revoke an access key", Args: exactArgs(1),
		Example: `  mqlite keys revoke 3f2a9c0d11e4b7a8 --yes --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				if err := g.confirm(revokeYes, fmt.Sprintf("revoke key %s (its holders lose access at once)", args[0])); err != nil {
					return err
				}
				if err := b.RevokeKey(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"revoked": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "revoked key %s\n", args[0]) })
			})
		},
	}, &revokeYes)
	return withExample(`  mqlite keys create --role producer --queue orders --db app.db
  mqlite keys list --url http://127.0.0.1:7420 --key $ADMIN_KEY`, group("keys", "access keys of the broker: create, list, revoke", create, list, revoke))
}

func backupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "backup DEST", Short: "write a consistent copy of the store to a new file", Args: exactArgs(1),
		Long: `backup writes a consistent copy of the store to DEST, which must not exist.
Through a broker (--url) DEST is a plain file name in the folder the broker
was started with (mqlite serve --backup-dir); without one the broker refuses.
On a terminal a bar shows the bytes written so far (of a local file) or the
time taken.`,
		Example: `  mqlite backup app-2026-01-02.db --db app.db
  mqlite backup app-2026-01-02.db --url http://127.0.0.1:7420 --key $ADMIN_KEY`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				stop := g.backupBar(args[0])
				err := b.Backup(cmd.Context(), args[0])
				stop()
				if err != nil {
					return err
				}
				return g.emit(wire.BackupRequest{Path: args[0]}, func(w io.Writer) { fmt.Fprintf(w, "backed up to %s\n", args[0]) })
			})
		},
	}
}

// backupBar draws the progress of a backup into dst while it runs, until
// the returned stop is called. Of a local file it counts the bytes of the
// copy being written (Store.Backup writes it beside dst under a temporary
// name) against the size of the store's file; through a broker it can only
// show the time taken.
func (g *globals) backupBar(dst string) (stop func()) {
	size := int64(-1)
	if fi, err := os.Stat(g.db); err == nil && g.url == "" {
		size = fi.Size()
	}
	bar := g.bar(size, "backing up", "bytes")
	if size < 0 || !g.barShown() {
		return func() { _ = bar.Finish() }
	}
	done, finished := make(chan struct{}), make(chan struct{})
	pattern := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".mqlite-backup-*")
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			names, _ := filepath.Glob(pattern)
			for _, n := range names {
				if fi, err := os.Stat(n); err == nil {
					_ = bar.Set64(min(fi.Size(), size))
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = bar.Finish()
	}
}
