package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/mqlite/mqlite"
	"github.com/spf13/cobra"
)

func findCmd(g *globals) *cobra.Command {
	var opts mqlite.FindParams
	var state, property string
	cmd := &cobra.Command{
		Use:   "find QUEUE",
		Short: "find messages by state, subject prefix, message id or property",
		Long: `find shows the messages of QUEUE that match every filter given, without
locking them, a page at a time: it examines at most --scan-max messages of the
queue and prints where the next page starts (--from). --state dead_lettered
searches the dead letters (an admin key through a broker).`,
		Example: `  mqlite find orders --subject-prefix order. --property tenant=acme --db app.db
  mqlite find orders --message-id order-42 --url http://127.0.0.1:7420 --key $KEY`,
		ValidArgsFunction: g.completeQueues,
		Args:              exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.State = mqlite.State(state)
			if property != "" {
				k, v, ok := strings.Cut(property, "=")
				if !ok || k == "" {
					return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "--property wants KEY=VALUE"}
				}
				opts.PropertyKey, opts.PropertyValue = k, v
			}
			return g.read(cmd.Context(), func(b backend) error {
				res, err := b.Find(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				out := struct {
					jsonMessages
					NextSeq int64 `json:"next_seq"`
					Scanned int   `json:"scanned"`
				}{toJSON(res.Messages, ""), res.NextSeq, res.Scanned}
				return g.emit(out, func(w io.Writer) {
					printMessages(w, res.Messages, false, "")
					if res.NextSeq > 0 {
						fmt.Fprintf(w, "\n%d examined; more from --from %d\n", res.Scanned, res.NextSeq)
					}
					if opts.State == "" {
						fmt.Fprintln(w, "dead letters are not searched; add --state dead_lettered")
					}
				})
			})
		},
	}
	fs := cmd.Flags()
	fs.Int64Var(&opts.FromSeq, "from", 0, "the first sequence number")
	fs.IntVar(&opts.Max, "max", 100, "how many matches at most (up to 1000)")
	fs.IntVar(&opts.ScanMax, "scan-max", mqlite.DefaultFindScan, "how many messages of the queue one page examines (up to 100000)")
	fs.StringVar(&state, "state", "", "only this state: active, scheduled, locked, deferred or dead_lettered (default every state but dead_lettered)")
	fs.StringVar(&opts.SubjectPrefix, "subject-prefix", "", "only subjects that start with this")
	fs.StringVar(&opts.MessageID, "message-id", "", "only this MessageID")
	fs.StringVar(&property, "property", "", "only messages with this property, as KEY=VALUE")
	return cmd
}
