// Command mqlite works with mqlite stores from the shell: on a local file
// (--db) or through a broker (--url and --key), and it runs the broker
// itself (mqlite serve).
//
// Usage:
//
//	mqlite <command> [flags]
//
// The commands are serve, send, receive, peek, dlq (list, redrive, purge), deliver-now,
// queues (list, create, update, delete), topics (list, create, delete),
// subscriptions (create, update, delete), schedules (list, create, update,
// delete), stats, keys (create, list, revoke), backup, relay, demo, schema
// and migrate. Run "mqlite <command> --help" for a command's flags and an
// example.
//
// Only queues create, topics create, keys create, serve and migrate create a
// store in a file that has none (saying so on stderr), or migrate an older
// one; every other command opens an existing store and never writes a file
// it was asked to read.
//
// --db, --url and --key may also come from MQLITE_DB, MQLITE_URL and
// MQLITE_KEY. Output is for people unless --json is given. The exit code is
// 0 on success, 1 when the command failed and 2 for a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks a usage error: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run executes args and returns the process exit code: 0 on success, 1 when
// the command failed, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if msg := err.Error(); strings.HasPrefix(msg, "mqlite") {
		fmt.Fprintln(stderr, msg)
	} else {
		fmt.Fprintf(stderr, "mqlite: %s\n", msg)
	}
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") ||
		strings.HasPrefix(err.Error(), "unknown flag") || strings.HasPrefix(err.Error(), "unknown shorthand flag") {
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return 2
	}
	return 1
}

// newRoot builds the command tree.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "mqlite",
		Short: "a message queue and transactional outbox in one SQLite file",
		Long: `mqlite works with mqlite stores: on a local file (--db FILE) or through a
broker (--url URL --key KEY), and runs the broker (mqlite serve).

--db, --url and --key also come from MQLITE_DB, MQLITE_URL and MQLITE_KEY.
Exit codes: 0 success, 1 failure, 2 usage error.`,
		Example: `  mqlite queues create orders --db app.db
  mqlite send orders '{"id":1}' --db app.db
  MQLITE_URL=http://127.0.0.1:7420 MQLITE_KEY=mqlite_... mqlite receive orders --complete`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("no command given; run 'mqlite --help'")
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&g.db, "db", os.Getenv("MQLITE_DB"), "the mqlite `file` to work on (env MQLITE_DB)")
	pf.StringVar(&g.url, "url", os.Getenv("MQLITE_URL"), "the broker's base `URL`, instead of --db (env MQLITE_URL)")
	pf.StringVar(&g.key, "key", os.Getenv("MQLITE_KEY"), "the access `key` for --url (env MQLITE_KEY)")
	pf.BoolVar(&g.json, "json", false, "print JSON, for scripts")
	root.AddCommand(serveCmd(g), sendCmd(g), receiveCmd(g), peekCmd(g), dlqCmd(g), deliverNowCmd(g), queuesCmd(g),
		topicsCmd(g), subscriptionsCmd(g), schedulesCmd(g), statsCmd(g), keysCmd(g), backupCmd(g), demoCmd(g), relayCmd(g),
		schemaCmd(g), migrateCmd(g))
	return root
}

// noArgs and the other Args validators report usage errors (exit code 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s: unexpected argument %q", cmd.CommandPath(), args[0])
	}
	return nil
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s needs %s (got %d arguments)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

func rangeArgs(lo, hi int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usagef("%s needs %s (got %d arguments)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}
