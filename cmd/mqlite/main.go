// Command mqlite works with mqlite stores from the shell: on a local file
// (--db) or through a broker (--url and --key), and it runs the broker
// itself (mqlite serve).
//
// Usage:
//
//	mqlite <command> [flags]
//
// The commands are serve, send, receive, move, peek, find, dlq (list, redrive,
// purge), deliver-now, queues (list, create, update, pause, resume, purge,
// delete), topics (list, create, delete), subscriptions (create, update,
// delete), schedules (list, create, update, delete), stats, keys (create,
// list, revoke), backup, copy, relay, demo, schema, migrate and version. Run
// "mqlite <command> --help" for a command's flags and an example.
//
// Only queues create, topics create, keys create, serve and migrate create a
// store in a file that has none (saying so on stderr), or migrate an older
// one; every other command opens an existing store and never writes a file
// it was asked to read.
//
// --db, --url and --key may also come from MQLITE_DB, MQLITE_URL and
// MQLITE_KEY; help says whether each is set, never its value. Output is for
// people unless --json is given: then every output, an error included, is
// one JSON value on stdout. The exit code is 0 on success, 1 when the
// command failed and 2 for a usage error, whether the command line or the
// store (or broker) found it. "mqlite completion bash|zsh|fish" prints a
// shell completion script; "mqlite version" the build.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks a usage error: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	reasonUsage = "usage" // the reason of a usage error in a --json error object
)

// run executes args and returns the process exit code: 0 on success, 1 when
// the command failed, 2 on a usage error.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(ctx, &globals{stdin: stdin, stdout: stdout, stderr: stderr, terminal: isTerminal}, args)
}

// execute runs args with g's streams and returns the exit code.
func execute(ctx context.Context, g *globals, args []string) int {
	stderr := g.stderr
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(g.stdin)
	root.SetOut(g.stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if g.json || slices.Contains(args, "--json") {
		// One JSON value on stdout, whatever happened.
		_ = g.writeJSON(errorObject(err, code))
		return code
	}
	if msg := err.Error(); strings.HasPrefix(msg, "mqlite") {
		fmt.Fprintln(stderr, msg)
	} else {
		fmt.Fprintf(stderr, "mqlite: %s\n", msg)
	}
	if code == exitUsage && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// exitCode is 2 for a usage error, whether the command line is wrong or the
// store (or the broker) refused an argument, and 1 for any other failure.
func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, mqlite.ErrInvalidArgument) ||
		strings.HasPrefix(err.Error(), "unknown command") {
		return exitUsage
	}
	return exitFailed
}

// jsonError is the --json form of a failure: {"error": {...}}, the broker's
// error object with the exit code.
type jsonError struct {
	Error struct {
		wire.Error
		ExitCode int `json:"exit_code"`
	} `json:"error"`
}

// errorObject describes err as the broker would: its stable code and
// reason (from the broker's answer, or from the same table for a local
// store), its message and the exit code.
func errorObject(err error, code int) jsonError {
	var out jsonError
	var ce *client.Error
	var ue usageError
	switch {
	case errors.As(err, &ce):
		out.Error.Error = wire.Error{Code: ce.Code, Reason: ce.Reason}
	case errors.As(err, &ue) || code == exitUsage && !errors.Is(err, mqlite.ErrInvalidArgument):
		out.Error.Error = wire.Error{Code: wire.CodeInvalid, Reason: reasonUsage}
	case errors.Is(err, client.ErrUnavailable):
		out.Error.Error = wire.Error{Code: wire.CodeUnavailable, Reason: "unreachable"}
	default:
		out.Error.Error = *wire.ErrorOf(err)
	}
	out.Error.Message = err.Error()
	out.Error.ExitCode = code
	return out
}

// envFlag is a global flag that an environment variable may set.
type envFlag struct {
	name, env, usage string
	dst              *string
}

// newRoot builds the command tree.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "mqlite",
		Short: "a message queue and transactional outbox in one SQLite file",
		Long: `mqlite works with mqlite stores: on a local file (--db FILE) or through a
broker (--url URL --key KEY), and runs the broker (mqlite serve).

--db, --url and --key also come from MQLITE_DB, MQLITE_URL and MQLITE_KEY
(help says whether each is set, never its value). With --json every output,
an error included, is one JSON value on stdout.
Exit codes: 0 success, 1 failure, 2 usage error.`,
		Example: `  mqlite queues create orders --db app.db
  mqlite send orders '{"id":1}' --db app.db
  MQLITE_URL=http://127.0.0.1:7420 MQLITE_KEY=mqlite_... mqlite receive orders --complete`,
		Version:       buildVersion().Short(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          subcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("no command given; run 'mqlite --help'")
		},
	}
	root.SetVersionTemplate("mqlite {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	envs := []envFlag{
		{"db", "MQLITE_DB", "the mqlite `file` (or postgres:// URL) to work on", &g.db},
		{"url", "MQLITE_URL", "the broker's base `URL`, instead of --db", &g.url},
		{"key", "MQLITE_KEY", "the access `key` for --url", &g.key},
	}
	for _, e := range envs {
		// The default stays empty, so that help never prints the value
		// (a key would land in screenshots and CI logs); it only says
		// whether the variable is set. PersistentPreRunE reads it.
		state := "not set"
		if os.Getenv(e.env) != "" {
			state = "set"
		}
		pf.StringVar(e.dst, e.name, "", fmt.Sprintf("%s (env %s, %s)", e.usage, e.env, state))
	}
	pf.BoolVar(&g.json, "json", false, "print JSON, for scripts: every output, errors included, is one JSON value")
	pf.DurationVar(&g.retryFor, "retry-for", defaultRetryFor, "with --url: how long to retry a broker that cannot be reached")
	g.envs = envs
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		g.applyEnv(cmd)
		return refuseNegativeDurations(cmd)
	}
	root.AddCommand(serveCmd(g), sendCmd(g), receiveCmd(g), moveCmd(g), peekCmd(g), findCmd(g), dlqCmd(g), deliverNowCmd(g), queuesCmd(g),
		topicsCmd(g), subscriptionsCmd(g), schedulesCmd(g), statsCmd(g), keysCmd(g), backupCmd(g), copyCmd(g), demoCmd(g), relayCmd(g),
		schemaCmd(g), migrateCmd(g), versionCmd(g))
	return root
}

// applyEnv sets each global flag not given on the command line from its
// environment variable. A store named on the command line (--db or --url)
// wins over the environment: the other one's variable is then not read,
// so that an exported MQLITE_URL does not refuse an explicit --db.
func (g *globals) applyEnv(cmd *cobra.Command) {
	given := func(name string) bool {
		f := cmd.Flags().Lookup(name)
		return f != nil && f.Changed && f.Value.String() != ""
	}
	for _, e := range g.envs {
		f := cmd.Flags().Lookup(e.name)
		if f == nil || f.Changed {
			continue
		}
		if e.name == "db" && given("url") || e.name == "url" && given("db") {
			continue
		}
		*e.dst = os.Getenv(e.env)
	}
}

// refuseNegativeDurations refuses a negative duration given to any flag
// (--delay -5s would deliver in the past, --wait -1s would not wait):
// a usage error, before anything is opened. The one negative a flag
// documents, --dedup-window -1ns (off), passes.
func refuseNegativeDurations(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "duration" {
			return
		}
		d, perr := time.ParseDuration(f.Value.String())
		if perr != nil || d >= 0 || f.Name == "dedup-window" && d == -1 {
			return
		}
		err = usagef("--%s %s: a duration cannot be negative", f.Name, f.Value)
	})
	return err
}

// subcommandArgs is the Args of a command that only holds subcommands: an
// argument is an unknown subcommand, with cobra's suggestions.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageError{errors.New(msg)}
}

// usageArgs makes a cobra.PositionalArgs report a usage error (exit code
// 2) that names what the command takes.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usagef("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())
		}
		return nil
	}
}

var (
	noArgs = usageArgs(cobra.NoArgs)
)

func exactArgs(n int) cobra.PositionalArgs      { return usageArgs(cobra.ExactArgs(n)) }
func rangeArgs(lo, hi int) cobra.PositionalArgs { return usageArgs(cobra.RangeArgs(lo, hi)) }
