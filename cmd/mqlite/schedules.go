package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/wire"
)

func printSchedules(w io.Writer, ss []mqlite.ScheduleInfo) {
	fmt.Fprintln(w, "NAME\tTARGET\tWHEN\tNEXT\tLAST\tFIRED\tSKIPPED\tLAST ERROR")
	for _, s := range ss {
		when := s.Options.Cron
		switch {
		case when == "":
			when = "every " + s.Options.Every.String()
		case s.Options.TimeZone != "":
			when += " (" + s.Options.TimeZone + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Options.Target, when, timeText(s.NextAt),
			timeText(s.LastAt), s.Fired, s.Skipped, s.LastError)
	}
}

// timeText shows t in RFC 3339, or "-" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// scheduleFlagFields copies the option of each flag of a schedule command
// from src to dst: update applies only the flags given.
var scheduleFlagFields = map[string]func(dst, src *mqlite.ScheduleOptions){
	"target":   func(d, s *mqlite.ScheduleOptions) { d.Target = s.Target },
	"cron":     func(d, s *mqlite.ScheduleOptions) { d.Cron = s.Cron },
	"tz":       func(d, s *mqlite.ScheduleOptions) { d.TimeZone = s.TimeZone },
	"every":    func(d, s *mqlite.ScheduleOptions) { d.Every = s.Every },
	"start":    func(d, s *mqlite.ScheduleOptions) { d.Start = s.Start },
	"catch-up": func(d, s *mqlite.ScheduleOptions) { d.CatchUp = s.CatchUp },
	"body":     func(d, s *mqlite.ScheduleOptions) { d.Body = s.Body },
	"group":    func(d, s *mqlite.ScheduleOptions) { d.GroupID = s.GroupID },
	"subject":  func(d, s *mqlite.ScheduleOptions) { d.Subject = s.Subject },
	"prop":     func(d, s *mqlite.ScheduleOptions) { d.Properties = s.Properties },
	"ttl":      func(d, s *mqlite.ScheduleOptions) { d.TTL = s.TTL },
}

// updateSchedule reads the schedule, applies the flags given (o holds
// their values) and writes it back: an option not given keeps its value,
// except that --cron replaces an interval and --every a cron spec (a
// schedule has one of them).
func updateSchedule(cmd *cobra.Command, b backend, name string, o mqlite.ScheduleOptions) error {
	s, err := b.GetSchedule(cmd.Context(), name)
	if err != nil {
		return err
	}
	opts := s.Options
	fs := cmd.LocalNonPersistentFlags()
	switch {
	case fs.Changed("cron") && !fs.Changed("every"):
		opts.Every = 0
	case fs.Changed("every") && !fs.Changed("cron"):
		opts.Cron, opts.TimeZone = "", ""
	}
	var missing []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			return
		}
		if apply, ok := scheduleFlagFields[f.Name]; ok {
			apply(&opts, &o)
		} else {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("internal: no schedule option for --%s", strings.Join(missing, ", --"))
	}
	return b.UpdateSchedule(cmd.Context(), name, opts)
}

// allSchedules reads every schedule b lists, a page at a time.
func allSchedules(ctx context.Context, b backend) ([]mqlite.ScheduleInfo, error) {
	var all []mqlite.ScheduleInfo
	for opts := (mqlite.ListSchedulesParams{}); ; {
		page, err := b.ListSchedules(ctx, opts)
		if err != nil || len(page) == 0 {
			return all, err
		}
		all = append(all, page...)
		opts.After = page[len(page)-1].Name
	}
}

func schedulesCmd(g *globals) *cobra.Command {
	list := &cobra.Command{
		Use: "list", Short: "list the schedules", Args: noArgs,
		Example: `  mqlite schedules list --db app.db`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				ss, err := allSchedules(cmd.Context(), b)
				if err != nil {
					return err
				}
				out := wire.SchedulesResponse{Schedules: []wire.Schedule{}}
				for _, s := range ss {
					out.Schedules = append(out.Schedules, wire.FromSchedule(s))
				}
				return g.emit(out, func(w io.Writer) { printSchedules(w, ss) })
			})
		},
	}
	set := func(use, short, example string, update bool) *cobra.Command {
		var (
			o     mqlite.ScheduleOptions
			body  string
			start string
			props []string
		)
		cmd := &cobra.Command{
			Use: use + " NAME", Short: short, Example: example, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				o.Body = []byte(body)
				if start != "" {
					t, err := time.Parse(time.RFC3339, start)
					if err != nil {
						return usagef("--start %q: want an RFC 3339 time", start)
					}
					o.Start = t
				}
				var err error
				if o.Properties, err = parseProps(props); err != nil {
					return err
				}
				return g.with(cmd.Context(), func(b backend) error {
					if update {
						err = updateSchedule(cmd, b, args[0], o)
					} else {
						err = b.CreateSchedule(cmd.Context(), args[0], o)
					}
					if err != nil {
						return err
					}
					s, err := b.GetSchedule(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					return g.emit(wire.FromSchedule(s), func(w io.Writer) { printSchedules(w, []mqlite.ScheduleInfo{s}) })
				})
			},
		}
		f := cmd.Flags()
		f.StringVar(&o.Target, "target", "", "the `QUEUE` or topic each period's message goes to")
		f.StringVar(&o.Cron, "cron", "", "a cron `SPEC`: five fields or a descriptor such as @hourly")
		f.StringVar(&o.TimeZone, "tz", "", "the IANA time `ZONE` of --cron (default UTC)")
		f.DurationVar(&o.Every, "every", 0, "a fixed period instead of --cron (at least 1s)")
		f.StringVar(&start, "start", "", "the first moment a period may begin, RFC 3339 (--every counts from it)")
		f.IntVar(&o.CatchUp, "catch-up", 0, "how many missed periods, at most, are sent after downtime (default 10)")
		f.StringVar(&body, "body", "", "the body of each message")
		f.StringVar(&o.GroupID, "group", "", "the group id of each message")
		f.StringVar(&o.Subject, "subject", "", "the subject of each message")
		f.StringArrayVar(&props, "prop", nil, "a property `key=value` of each message (repeat)")
		f.DurationVar(&o.TTL, "ttl", 0, "the time to live of each message (default: the queue's)")
		return cmd
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "delete a schedule (its messages already sent stay)", Args: exactArgs(1),
		Example: `  mqlite schedules delete nightly --db app.db`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.with(cmd.Context(), func(b backend) error {
				if err := b.DeleteSchedule(cmd.Context(), args[0]); err != nil {
					return err
				}
				return g.emit(map[string]string{"deleted": args[0]}, func(w io.Writer) { fmt.Fprintf(w, "deleted schedule %s\n", args[0]) })
			})
		},
	}
	return withExample(`  mqlite schedules create nightly --target reports --cron '0 2 * * *' --tz Europe/Paris --body run --db app.db
  mqlite schedules list --url http://127.0.0.1:7420 --key $KEY`, group("schedules", "periodic messages: list, create, update, delete", list,
		set("create", "create a schedule: one message into --target per period", `  mqlite schedules create heartbeat --target health --every 30s --db app.db`, false),
		set("update", "change a schedule's options: only the flags given, the others stay", `  mqlite schedules update nightly --target reports --cron '0 3 * * *' --db app.db`, true),
		del))
}
