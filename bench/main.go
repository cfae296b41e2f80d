// Command bench compares mqlite with goqite, River (its SQLite driver) and a
// raw-SQL baseline in one process and one run, and prints the table of
// docs/benchmark.md ("Against goqite and River"):
//
//	go run -C bench .          # make bench runs this
//	go run -C bench . -short   # seconds: proves every cell runs
//
// Every peer gets a fresh file per measurement on modernc.org/sqlite with
// the same settings (WAL, synchronous NORMAL, one connection, automatic
// checkpoints on); bodies are 256 bytes. Each cell is the median of the
// runs, and the peers take turns within each run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"time"

	"github.com/mqlite/mqlite/bench/internal/measure"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "tiny sizes, one run: a smoke test, not a measurement")
	runs := fs.Int("runs", 0, "runs per cell (default 3, 1 with -short)")
	verbose := fs.Bool("v", false, "print each measurement to stderr as it is taken")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sz := FullSizes
	if *short {
		sz = SmokeSizes
	}
	if *runs > 0 {
		sz.Runs = *runs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "mqlite-bench-*")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	var progress io.Writer
	if *verbose {
		progress = stderr
	}
	started := time.Now()
	res, err := Run(ctx, dir, Peers(), sz, progress)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s, %s, %d cores (%s), %s; %d runs per cell; took %s\n\n",
		started.UTC().Format("2006-01-02"), runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), measure.CPUModel(),
		runtime.Version(), sz.Runs, time.Since(started).Round(time.Second))
	if err := res.Markdown(stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
