package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

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
			return g.read(cmd.Context(), func(b backend) error {
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
