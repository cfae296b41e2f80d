// Command brokers measures mqlite's broker, through its Go client, beside the
// brokers a team would run instead: a local RabbitMQ (AMQP 0-9-1 on
// 127.0.0.1:5672, guest/guest) and a local NATS JetStream (127.0.0.1:4222),
// in one run, and prints the table of docs/benchmark.md ("The consume path
// against RabbitMQ and JetStream"):
//
//	go run -C bench/brokers .           # make bench runs this
//	go run -C bench/brokers . -short    # seconds: proves every cell runs
//
// Five scenarios, 256-byte bodies: produce one at a time (each
// acknowledged), produce in batches of 100, consume one at a time with an
// ack each, consume in batches of 100, and the time from a send to its
// consumer (p50, p99). Each side's CPU per message is read from /proc for
// its server process (the mqlite broker runs as a child process of this
// program). A side whose server is not reachable is left out, unless
// MQLITE_REQUIRE_SERVICES=1, when the run fails. Each side's settings are
// printed beside the table.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if path := os.Getenv(serveEnv); path != "" {
		return serveMQLite(path, stdout, stderr)
	}
	fs := flag.NewFlagSet("brokers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "tiny sizes, one run: a smoke test, not a measurement")
	runs := fs.Int("runs", 3, "runs per cell; each cell is the median")
	n := fs.Int("n", 20000, "messages per scenario")
	lat := fs.Int("latency", 2000, "messages of the send-to-consumer scenario")
	window := fs.Int("window", 100, "the prefetch window of the streaming consumers (RabbitMQ's QoS, JetStream's pull batch, mqlite's stream)")
	sidesOnly := fs.String("sides", "", "comma-separated sides to run (default all): "+strings.Join(sideNames(), ","))
	only := fs.String("scenario", "", "run only the scenarios whose name holds this text (\"consume one\")")
	verbose := fs.Bool("v", false, "print each measurement to stderr as it is taken")
	cpuProfile := fs.String("cpuprofile", "", "write this program's CPU profile (the clients' side; MQLITE_BENCH_CPUPROFILE is the broker's) to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "brokers:", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	sz := Sizes{Messages: *n, Latency: *lat, Runs: *runs, Batch: 100, Window: *window, Body: 256, Only: *only}
	if *short {
		sz = Sizes{Messages: 300, Latency: 50, Runs: 1, Batch: 100, Window: 10, Body: 256, Only: *only}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var progress io.Writer
	if *verbose {
		progress = stderr
	}
	sides, skipped, err := openSides(ctx, *sidesOnly, sz)
	if err != nil {
		fmt.Fprintln(stderr, "brokers:", err)
		return 1
	}
	defer func() {
		for _, s := range sides {
			_ = s.Close()
		}
	}()
	started := time.Now()
	load := loadAverage()
	res, err := Run(ctx, sides, sz, progress)
	if err != nil {
		fmt.Fprintln(stderr, "brokers:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s, %s, %d cores, %s; load average at the start %s, at the end %s; %d runs per cell, %d messages per scenario (%d for latency), window %d; took %s\n\n",
		started.UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(),
		runtime.Version(), load, loadAverage(), sz.Runs, sz.Messages, sz.Latency, sz.Window, time.Since(started).Round(time.Second))
	res.Markdown(stdout)
	for _, s := range skipped {
		fmt.Fprintf(stdout, "\nleft out: %s\n", s)
	}
	return 0
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
