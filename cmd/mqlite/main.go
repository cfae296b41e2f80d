// Command mqlite works with mqlite files from the shell.
//
// Usage:
//
//	mqlite <command> [flags]
//
// The commands are:
//
//	demo    write orders and their events in one transaction, roll one back, show the queue
//	relay   forward a queue to a webhook, NATS JetStream or RabbitMQ
//
// Run "mqlite <command> -h" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: run parses its own flags from args and returns
// the exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"demo", "write orders and their events in one transaction, roll one back, show the queue", runDemo},
	{"relay", "forward a queue to a webhook, NATS JetStream or RabbitMQ", runRelay},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the process exit code: 0 on
// success, 1 when the command failed, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "mqlite: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: mqlite <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "mqlite <command> -h" for a command's flags.`)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("db", "mqlite-demo.db", "the mqlite `file` to use; created when missing")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: mqlite demo [-db file]")
		fmt.Fprintln(fs.Output())
		fmt.Fprintln(fs.Output(), "Creates the queue \"orders\" and a business table orders, commits three orders")
		fmt.Fprintln(fs.Output(), "with their events in one transaction, rolls a fourth back, and prints what the")
		fmt.Fprintln(fs.Output(), "queue holds. Run it again to add three more.")
		fmt.Fprintln(fs.Output())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mqlite demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if err := demo(ctx, stdout, *path); err != nil {
		fmt.Fprintf(stderr, "mqlite demo: %v\n", err)
		return 1
	}
	return 0
}
