// Command postgres sets mqlite on PostgreSQL beside River (its pgx driver)
// and two hand-written queues in SQL (a minimal one, and a peek-lock one
// with leases, tokens, delivery counts, dead letters and receipts), on one
// database of the benchmark's own, in one run, and prints the table of
// docs/benchmark.md ("On PostgreSQL"):
//
//	go run -C bench ./postgres            # make bench-postgres runs this
//	go run -C bench ./postgres -short     # seconds: proves every cell runs
//	go run -C bench ./postgres -rows 'drain' -peers 'mqlite|raw' -runs 1 -v
//
// The server is -url (default the local one, 127.0.0.1:5432, role
// postgres), at its own settings but for synchronous_commit, which -sync
// sets on every connection of every side (off by default: a commit does
// not wait for the disk, the counterpart of mqlite's SyncNormal on
// SQLite, where an application's crash loses nothing and the machine's may
// lose the last commits). Each measurement gets a fresh schema; bodies are 256 bytes. Each
// cell is the median of the runs; within a run the sides take turns, in
// an order that rotates from run to run. The latency rows run the
// consumer in a second process (this program again, -consume) and the
// producer in this one.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mqlite/mqlite/bench/internal/measure"
)

// BodySize is the size of every message body.
const BodySize = 256

// Sizes is how much work each row does in one run.
type Sizes struct {
	Send1, Send100, Drain1, Drain100 int
	// Work is the messages worked with a row each; Eight the messages the
	// eight producers send together, one per transaction.
	Work, Eight int
	// Latency is how many messages the latency rows send, at Rate per
	// second on average (Poisson arrivals).
	Latency int
	Rate    float64
	Runs    int
}

// FullSizes are the sizes docs/benchmark.md reports.
var FullSizes = Sizes{Send1: 2000, Send100: 20000, Drain1: 2000, Drain100: 10000, Work: 2000, Eight: 4000, Latency: 400, Rate: 50, Runs: 3}

// SmokeSizes prove that every side runs every row, in seconds.
var SmokeSizes = Sizes{Send1: 20, Send100: 200, Drain1: 20, Drain100: 200, Work: 20, Eight: 40, Latency: 10, Rate: 200, Runs: 1}

// producers is how many producers the eight-producer row runs.
const producers = 8

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("postgres", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "tiny sizes, one run: a smoke test, not a measurement")
	runs := fs.Int("runs", 0, "runs per cell (default 3, 1 with -short)")
	verbose := fs.Bool("v", false, "print each measurement to stderr as it is taken")
	admin := fs.String("url", DefaultAdminURL, "the server: a URL whose role may create databases")
	rowsRE := fs.String("rows", "", "run only the rows whose name matches this regexp")
	peersRE := fs.String("peers", "", "run only the sides whose name matches this regexp")
	sync := fs.String("sync", "off", "synchronous_commit of every connection: off (the default: a commit does not wait for the disk, as mqlite's SyncNormal on SQLite), on, or server (the server's setting)")
	cpuprofile := fs.String("cpuprofile", "", "write this process's CPU profile (the producer and the measured sides; not the consumer processes) to this file")
	consume := fs.String("consume", "", "(internal) be the consumer process of a latency run for this side")
	n := fs.Int("n", 0, "(internal) messages the consumer process waits for")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *consume != "" {
		if err := consumerProcess(ctx, *consume, *admin, *n, stdout); err != nil {
			fmt.Fprintln(stderr, "consumer:", err)
			return 1
		}
		return 0
	}
	sz := FullSizes
	if *short {
		sz = SmokeSizes
	}
	if *runs > 0 {
		sz.Runs = *runs
	}
	rowFilter, err := regexp.Compile(*rowsRE)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	peerFilter, err := regexp.Compile(*peersRE)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var ps []peer
	for _, p := range peers() {
		if peerFilter.MatchString(p.name) {
			ps = append(ps, p)
		}
	}
	var progress io.Writer
	if *verbose {
		progress = stderr
	}
	db, err := createBenchDB(ctx, *admin)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if *sync != "server" {
		db.sync = *sync
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	started, load0 := time.Now(), measure.LoadAverage()
	res, err := run(ctx, db, ps, rowFilter, sz, progress)
	err = errors.Join(err, db.drop())
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s, %s, %d cores (%s), %s, %s; load average %s at the start, %s at the end; %d runs per cell; took %s\n\n",
		started.UTC().Format("2006-01-02"), runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), measure.CPUModel(),
		runtime.Version(), db.server, load0, measure.LoadAverage(), sz.Runs, time.Since(started).Round(time.Second))
	if err := res.markdown(stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// row is one row of the table.
type row struct {
	name string
	unit string
	// measure measures one run of side p on the fresh schema at url
	// (its tables made by setup).
	measure func(ctx context.Context, p peer, url string, in side, sz Sizes, rng *rand.Rand) (float64, error)
	// latency rows give two cells (p50, p99) from one run.
	latency bool
}

func rows() []row {
	return []row{
		{name: "send, 1 per tx", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return sendRate(ctx, in, bodies(rng, sz.Send1), 1)
		}},
		{name: "send, 100 per tx", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return sendRate(ctx, in, bodies(rng, sz.Send100), 100)
		}},
		{name: "drain, 1 at a time", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return timed(ctx, in, bodies(rng, sz.Drain1), func() error { return in.drain(ctx, sz.Drain1, 1) })
		}},
		{name: "drain, 100 per tx", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return timed(ctx, in, bodies(rng, sz.Drain100), func() error { return in.drain(ctx, sz.Drain100, 100) })
		}},
		{name: "job with a row, 8 workers", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return timed(ctx, in, bodies(rng, sz.Work), func() error { return in.work(ctx, sz.Work) })
		}},
		{name: "send, 8 producers, 1 per tx", unit: "msgs/s", measure: func(ctx context.Context, _ peer, _ string, in side, sz Sizes, rng *rand.Rand) (float64, error) {
			return eightProducers(ctx, in, bodies(rng, sz.Eight))
		}},
		{name: "send→handler p50, two processes", unit: "ms", latency: true},
	}
}

// bodies returns n distinct random bodies of BodySize bytes.
func bodies(rng *rand.Rand, n int) [][]byte { return measure.Bodies(rng, n, BodySize) }

func sendAll(ctx context.Context, in side, bs [][]byte, per int) error {
	return measure.SendAll(ctx, in.send, bs, per)
}

func sendRate(ctx context.Context, in side, bs [][]byte, per int) (float64, error) {
	return measure.SendRate(ctx, in.send, bs, per)
}

// timed sends bs as the backlog (100 per transaction, not timed), then
// times fn, and returns len(bs) over its time.
func timed(ctx context.Context, in side, bs [][]byte, fn func() error) (float64, error) {
	if err := sendAll(ctx, in, bs, 100); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := fn(); err != nil {
		return 0, err
	}
	return float64(len(bs)) / time.Since(start).Seconds(), nil
}

// eightProducers sends bs from producers goroutines at once, one message
// per transaction.
func eightProducers(ctx context.Context, in side, bs [][]byte) (float64, error) {
	errc := make(chan error, producers)
	start := time.Now()
	for k := range producers {
		go func() {
			for i := k; i < len(bs); i += producers {
				if err := in.send(ctx, bs[i:i+1]); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var errs []error
	for range producers {
		errs = append(errs, <-errc)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(len(bs)) / time.Since(start).Seconds(), nil
}

// result holds every run of every cell: cells[row][peer].
type result struct {
	peers []string
	// short are the peers' short names (peer.short).
	short []string
	rows  []string
	units []string
	cells [][][]float64
}

func run(ctx context.Context, db *benchDB, ps []peer, filter *regexp.Regexp, sz Sizes, progress io.Writer) (*result, error) {
	if err := db.readServer(ctx); err != nil {
		return nil, err
	}
	var rs []row
	for _, r := range rows() {
		if filter.MatchString(r.name) {
			rs = append(rs, r)
		}
	}
	res := &result{}
	for _, p := range ps {
		res.peers, res.short = append(res.peers, p.name), append(res.short, p.short)
	}
	for _, r := range rs {
		res.rows, res.units = append(res.rows, r.name), append(res.units, r.unit)
		if r.latency {
			res.rows, res.units = append(res.rows, "send→handler p99, two processes"), append(res.units, r.unit)
		}
	}
	res.cells = make([][][]float64, len(res.rows))
	for i := range res.cells {
		res.cells[i] = make([][]float64, len(ps))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range sz.Runs {
		ri := 0
		for _, r := range rs {
			for k := range ps {
				pi := (k + run) % len(ps)
				v, v99, err := measureOne(ctx, db, ps[pi], r, sz, rng)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, run %d: %w", ps[pi].name, r.name, run+1, err)
				}
				res.cells[ri][pi] = append(res.cells[ri][pi], v)
				if r.latency {
					res.cells[ri+1][pi] = append(res.cells[ri+1][pi], v99)
				}
				if progress != nil {
					fmt.Fprintf(progress, "run %d  %-32s %-20s %12.2f", run+1, r.name, ps[pi].name, v)
					if r.latency {
						fmt.Fprintf(progress, "  p99 %.2f", v99)
					}
					fmt.Fprintln(progress)
				}
			}
			ri++
			if r.latency {
				ri++
			}
		}
	}
	return res, nil
}

// measureOne measures one run of row r for p on a fresh schema.
func measureOne(ctx context.Context, db *benchDB, p peer, r row, sz Sizes, rng *rand.Rand) (v, v99 float64, err error) {
	url, drop, err := db.schema(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, drop()) }()
	in, err := p.open(ctx, url, true)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, in.close()) }()
	if !r.latency {
		v, err = r.measure(ctx, p, url, in, sz, rng)
		return v, 0, err
	}
	lat, err := latency(ctx, p, url, in, measure.Arrivals(rng, sz.Latency, sz.Rate))
	if err != nil {
		return 0, 0, err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(measure.Percentile(lat, 50)), ms(measure.Percentile(lat, 99)), nil
}

// latency starts the consumer process of p on url, waits until it runs,
// sends one message at each offset of at (from the start) in a transaction
// of its own, and returns what the consumer measured for each: from just
// before its transaction began to the start of its handler. The body
// carries the send's wall-clock time; both processes read the same clock.
func latency(ctx context.Context, p peer, url string, in side, at []time.Duration) ([]time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	cmd := exec.CommandContext(cctx, self, "-consume", p.name, "-url", url, "-n", strconv.Itoa(warmUp+len(at)))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<24)
	if !lines.Scan() || lines.Text() != "ready" {
		return nil, errors.Join(fmt.Errorf("the consumer process did not start: %q", lines.Text()), cmd.Wait())
	}
	// The warm-up: messages the consumer counts but does not measure, so
	// that its connections are open and its code paged in, then a pause.
	for range warmUp {
		if err := in.send(ctx, [][]byte{stamped(time.Time{})}); err != nil {
			return nil, errors.Join(err, cmd.Process.Kill(), cmd.Wait())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	for _, off := range at {
		if d := time.Until(t0.Add(off)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, errors.Join(ctx.Err(), cmd.Wait())
			}
		}
		if err := in.send(ctx, [][]byte{stamped(time.Now())}); err != nil {
			return nil, errors.Join(err, cmd.Process.Kill(), cmd.Wait())
		}
	}
	var lat []time.Duration
	if lines.Scan() {
		for f := range strings.FieldsSeq(lines.Text()) {
			ns, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, errors.Join(err, cmd.Wait())
			}
			lat = append(lat, time.Duration(ns))
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("the consumer process: %w", err)
	}
	if len(lat) != len(at) {
		return nil, fmt.Errorf("the consumer process measured %d of %d", len(lat), len(at))
	}
	return lat, nil
}

// warmUp is how many messages a latency run sends before those it
// measures.
const warmUp = 20

// stamped is a body that starts with t in Unix nanoseconds (zeros for the
// zero time: a warm-up message).
func stamped(t time.Time) []byte {
	b := make([]byte, BodySize)
	ns := int64(0)
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	copy(b, fmt.Sprintf("%020d", ns))
	for j := 20; j < len(b); j++ {
		b[j] = 'x'
	}
	return b
}

// consumerProcess is the consumer of a latency run: it opens side name on
// url (made by the producer), prints "ready" once its consumer runs, and
// after n messages one line of each message's latency in nanoseconds.
func consumerProcess(ctx context.Context, name, url string, n int, stdout io.Writer) error {
	i := slices.IndexFunc(peers(), func(p peer) bool { return p.name == name })
	if i < 0 {
		return fmt.Errorf("no side %q", name)
	}
	in, err := peers()[i].open(ctx, url, false)
	if err != nil {
		return err
	}
	lat := make(chan time.Duration, n)
	err = in.consume(ctx, n, func() { fmt.Fprintln(stdout, "ready") }, func(body []byte) {
		now := time.Now().UnixNano()
		sent, err := strconv.ParseInt(string(body[:20]), 10, 64)
		if err == nil && sent != 0 {
			select {
			case lat <- time.Duration(now - sent):
			default:
			}
		}
	})
	err = errors.Join(err, in.close())
	if err != nil {
		return err
	}
	close(lat)
	var b strings.Builder
	for d := range lat {
		fmt.Fprintf(&b, "%d ", int64(d))
	}
	_, err = fmt.Fprintln(stdout, strings.TrimSpace(b.String()))
	return err
}

// markdown writes the table of medians, with mqlite's over each other
// side's (for the throughput rows) when mqlite is in it.
func (r *result) markdown(w io.Writer) error {
	mi := slices.Index(r.peers, "mqlite")
	var b strings.Builder
	head := []string{fmt.Sprintf("median of %d runs", r.runs()), "unit"}
	head = append(head, r.peers...)
	if mi >= 0 {
		for j, p := range r.short {
			if j != mi {
				head = append(head, "mqlite / "+p)
			}
		}
	}
	fmt.Fprintf(&b, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(&b, "|---|---|%s\n", strings.Repeat("--:|", len(head)-2))
	for i, name := range r.rows {
		cells := []string{name, r.units[i]}
		for j := range r.peers {
			cells = append(cells, measure.Cell(measure.Median(r.cells[i][j]), r.units[i]))
		}
		if mi >= 0 {
			for j := range r.peers {
				if j == mi {
					continue
				}
				ratio := "—"
				if m, o := measure.Median(r.cells[i][mi]), measure.Median(r.cells[i][j]); r.units[i] != "ms" && o > 0 {
					ratio = fmt.Sprintf("%.2fx", m/o)
				}
				cells = append(cells, ratio)
			}
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *result) runs() int {
	n := 0
	for _, row := range r.cells {
		for _, c := range row {
			n = max(n, len(c))
		}
	}
	return n
}
