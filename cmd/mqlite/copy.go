package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
)

// copyCmd copies a SQLite store into a PostgreSQL database: the move of an
// application from one engine to the other.
func copyCmd(g *globals) *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "copy --from FILE --to URL",
		Short: "copy the store of a SQLite file into a PostgreSQL database (moving an application)",
		Long: `copy copies the store at --from (a SQLite file; --db when --from is not
given) into the PostgreSQL database at --to, in one transaction, and prints
what it copied: the queues and their settings, the messages in every state
(leases, delivery counts and bodies too), the schedules, topics,
subscriptions and access keys, and the records that answer retries (dedup
entries, settlement receipts, receive attempts, commit records). The file is
only read; it must not be open by a store (stop the application or broker
first) and must have this binary's layout (mqlite migrate).

The database gets mqlite's objects if it has none. One that already holds
queues, messages, topics, schedules or keys is refused and left as it was,
but for one that holds this very copy: running copy again (after a success,
or after a failure whose outcome is unknown) says "already copied" and
writes nothing. A failure or an interrupt leaves the database without a row.
Keep the password out of --to: PGPASSWORD or ~/.pgpass supply it.`,
		Example: `  mqlite copy --from app.db --to postgres://app@db.internal:5432/app`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				from = g.db
			}
			switch {
			case g.url != "":
				return usagef("copy works on a file: give --from FILE (not --url)")
			case from == "" || mqlite.IsPostgresURL(from):
				return usagef("copy needs the SQLite file to copy: --from FILE")
			case !mqlite.IsPostgresURL(to):
				return usagef("copy needs the PostgreSQL database to copy into: --to postgres://...")
			}
			rep, err := mqlite.Copy(cmd.Context(), from, to, mqlite.CopyOptions{})
			switch {
			case errors.Is(err, mqlite.ErrDBLocked):
				return fmt.Errorf("%w (stop the application or broker that has it open, then copy)", err)
			case errors.Is(err, mqlite.ErrMigrationNeeded):
				return fmt.Errorf("%w; upgrade it with: mqlite migrate --db %s", err, from)
			case err != nil:
				return err
			}
			return g.emit(rep, func(w io.Writer) { printCopy(w, from, redact(to), rep) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the SQLite `file` to copy (default --db)")
	f.StringVar(&to, "to", "", "the PostgreSQL database to copy into (a postgres:// `URL`)")
	return cmd
}

// printCopy writes a copy's report for people.
func printCopy(w io.Writer, from, to string, rep mqlite.CopyReport) {
	if rep.AlreadyCopied {
		fmt.Fprintf(w, "already copied: %s holds this copy of %s; nothing written\n", to, from)
	} else {
		fmt.Fprintf(w, "copied %s into %s\n", from, to)
	}
	states := slices.Sorted(maps.Keys(rep.ByState))
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%s %d", s, rep.ByState[s]))
	}
	rows := []struct {
		what string
		n    int64
		more string
	}{
		{"queues", rep.Queues, ""},
		{"messages", rep.Messages, strings.Join(parts, ", ")},
		{"body bytes", rep.BodyBytes, ""},
		{"topics", rep.Topics, ""},
		{"subscriptions", rep.Subscriptions, ""},
		{"schedules", rep.Schedules, ""},
		{"access keys", rep.AccessKeys, ""},
		{"dedup entries", rep.DedupEntries, ""},
		{"settlement receipts", rep.SettlementReceipts, ""},
		{"receive attempts", rep.ReceiveAttempts, ""},
		{"commit records", rep.CommitRecords, ""},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %s\t%d\t%s\n", r.what, r.n, r.more)
	}
	fmt.Fprintf(w, "  next message id\t%d\t\n", rep.NextMessageID)
}

// redact is a URL without its password, for output.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
