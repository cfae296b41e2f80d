package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sizes are the work of one run.
type Sizes struct {
	Messages int // per throughput scenario
	Latency  int // sends of the latency scenario
	Runs     int
	Batch    int    // of the batched scenarios
	Window   int    // the streaming consumers' prefetch window
	Body     int    // bytes
	Only     string // when set, only the scenarios whose name holds it
}

// Side is one broker under test, with its client.
type Side interface {
	// Name is the column's title; Settings says how it is set up.
	Name() string
	Settings() string
	// Produces is false for a side that only consumes differently from
	// another (the mqlite consume variants): it skips the produce scenarios.
	Produces() bool
	// CPU is the server process's CPU time so far (0 when unknown).
	CPU() time.Duration
	// Prepare makes queue fresh and empty.
	Prepare(ctx context.Context, queue string) error
	// ProduceOne sends bodies one at a time, each acknowledged before the next.
	ProduceOne(ctx context.Context, queue string, bodies [][]byte) error
	// ProduceBatch sends bodies in batches of batch, each batch acknowledged.
	ProduceBatch(ctx context.Context, queue string, bodies [][]byte, batch int) error
	// ConsumeOne takes n messages, handling and acknowledging each on its own.
	ConsumeOne(ctx context.Context, queue string, n int) error
	// ConsumeBatch takes n messages in batches of batch, one acknowledgement per batch.
	ConsumeBatch(ctx context.Context, queue string, n, batch int) error
	// Move takes n messages of from, one at a time, and sends each to to
	// before it acknowledges it (errNotApplicable: a side that does not
	// run this scenario).
	Move(ctx context.Context, from, to string, n int) error
	// Latency sends bodies one at a time to a running consumer and returns
	// each one's time from the send's start to its consumer.
	Latency(ctx context.Context, queue string, bodies [][]byte) ([]time.Duration, error)
	Close() error
}

// errNotApplicable marks a scenario a side does not run (the mqlite
// consume variants produce as the base side does).
var errNotApplicable = errors.New("not applicable")

// scenario is one row of the table.
type scenario struct {
	name    string
	latency bool
	run     func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error
}

func scenarios() []scenario {
	return []scenario{
		{name: "produce one at a time, each acknowledged", run: func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error {
			return s.ProduceOne(ctx, q, bs)
		}},
		{name: "produce in batches of 100", run: func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error {
			return s.ProduceBatch(ctx, q, bs, sz.Batch)
		}},
		{name: "consume one at a time with ack", run: func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error {
			return s.ConsumeOne(ctx, q, len(bs))
		}},
		{name: "consume in batches of 100", run: func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error {
			return s.ConsumeBatch(ctx, q, len(bs), sz.Batch)
		}},
		{name: moveScenario, run: func(ctx context.Context, s Side, q string, bs [][]byte, sz Sizes) error {
			return s.Move(ctx, q, q+"_out", len(bs))
		}},
		{name: "send→consumer p50 / p99", latency: true},
	}
}

// moveScenario is the consume → produce stage: its sides also prepare a
// second queue, the stage's output.
const moveScenario = "consume → produce to a second queue, one at a time"

// bodies returns n distinct bodies of size bytes (mqlite de-duplicates a
// send without a MessageID by its body).
func bodies(run, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size)
		for j := range b {
			b[j] = 'a' + byte((i+j)%26)
		}
		copy(b, fmt.Sprintf("r%d-m%d-", run, i))
		out[i] = b
	}
	return out
}

// cell is one scenario's figures on one side.
type cell struct {
	rates, cpus []float64 // msgs/s and CPU µs per message, one per run
	p50, p99    []float64 // ms, latency only
	err         error
}

// Result is a run's table.
type Result struct {
	sides []Side
	scs   []scenario
	cells [][]*cell // [scenario][side]
}

// Run measures every scenario on every side, the sides taking turns within
// each run.
func Run(ctx context.Context, sides []Side, sz Sizes, progress io.Writer) (*Result, error) {
	r := &Result{sides: sides}
	for _, sc := range scenarios() {
		if strings.Contains(sc.name, sz.Only) {
			r.scs = append(r.scs, sc)
		}
	}
	r.cells = make([][]*cell, len(r.scs))
	for i := range r.cells {
		r.cells[i] = make([]*cell, len(sides))
		for j := range sides {
			r.cells[i][j] = &cell{}
		}
	}
	for run := range sz.Runs {
		for i, sc := range r.scs {
			for j, s := range sides {
				c := r.cells[i][j]
				if c.err != nil {
					continue
				}
				q := fmt.Sprintf("bench_%d_%d", run, i)
				err := measure(ctx, s, q, sc, sz, run, c)
				if errors.Is(err, errNotApplicable) {
					c.err = err
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", s.Name(), sc.name, err)
				}
				if progress != nil {
					fmt.Fprintf(progress, "run %d %-45s %-28s %s\n", run+1, sc.name, s.Name(), c.last(sc.latency))
				}
			}
		}
	}
	return r, nil
}

func measure(ctx context.Context, s Side, q string, sc scenario, sz Sizes, run int, c *cell) error {
	if strings.HasPrefix(sc.name, "produce") && !s.Produces() {
		return errNotApplicable
	}
	if err := s.Prepare(ctx, q); err != nil {
		return err
	}
	if sc.name == moveScenario {
		if err := s.Move(ctx, q, q+"_out", 0); err != nil { // a side that does not move says so at once
			return err
		}
		if err := s.Prepare(ctx, q+"_out"); err != nil {
			return err
		}
	}
	if sc.latency {
		lat, err := s.Latency(ctx, q, bodies(run, sz.Latency, sz.Body))
		if err != nil {
			return err
		}
		slices.Sort(lat)
		c.p50 = append(c.p50, ms(percentile(lat, 50)))
		c.p99 = append(c.p99, ms(percentile(lat, 99)))
		return nil
	}
	bs := bodies(run, sz.Messages, sz.Body)
	if strings.HasPrefix(sc.name, "consume") {
		// The queue is filled first, unmeasured.
		if err := s.ProduceBatch(ctx, q, bs, sz.Batch); err != nil {
			return fmt.Errorf("filling the queue: %w", err)
		}
	}
	cpu0, start := s.CPU(), time.Now()
	if err := sc.run(ctx, s, q, bs, sz); err != nil {
		return err
	}
	took, cpu := time.Since(start), s.CPU()-cpu0
	c.rates = append(c.rates, float64(len(bs))/took.Seconds())
	c.cpus = append(c.cpus, float64(cpu.Microseconds())/float64(len(bs)))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (c *cell) last(latency bool) string {
	if latency {
		return fmt.Sprintf("%.2f / %.2f ms", c.p50[len(c.p50)-1], c.p99[len(c.p99)-1])
	}
	return fmt.Sprintf("%s/s (%.0f µs CPU)", commas(c.rates[len(c.rates)-1]), c.cpus[len(c.cpus)-1])
}

func (c *cell) String() string {
	switch {
	case c.err != nil:
		return "—"
	case len(c.p50) > 0:
		return fmt.Sprintf("%.2f / %.2f ms", median(c.p50), median(c.p99))
	case len(c.rates) > 0:
		return fmt.Sprintf("%s/s (%.0f µs)", commas(median(c.rates)), median(c.cpus))
	}
	return "—"
}

// Markdown prints the table: one column per side (its median over the
// runs, with the server's CPU per message), then each mqlite side's ratio to
// each other side, and the sides' settings.
func (r *Result) Markdown(w io.Writer) {
	var mq, peers []int
	for j, s := range r.sides {
		if strings.HasPrefix(s.Name(), "mqlite") {
			mq = append(mq, j)
		} else {
			peers = append(peers, j)
		}
	}
	fmt.Fprint(w, "| |")
	for _, s := range r.sides {
		fmt.Fprintf(w, " %s |", s.Name())
	}
	for _, p := range peers {
		fmt.Fprintf(w, " best mqlite ÷ %s |", r.sides[p].Name())
	}
	fmt.Fprint(w, "\n|---|")
	for range len(r.sides) + len(peers) {
		fmt.Fprint(w, "--:|")
	}
	fmt.Fprintln(w)
	for i, sc := range r.scs {
		fmt.Fprintf(w, "| %s |", sc.name)
		for j := range r.sides {
			fmt.Fprintf(w, " %s |", r.cells[i][j])
		}
		for _, p := range peers {
			fmt.Fprintf(w, " %s |", r.ratio(i, mq, p, sc.latency))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nEach cell: the median of the runs, messages per second and the server process's CPU time per message; latency in ms.")
	fmt.Fprintln(w, "A ratio above 1 is mqlite ahead (for latency: the other side's p99 over mqlite's).")
	fmt.Fprintln(w)
	for _, s := range r.sides {
		fmt.Fprintf(w, "- %s: %s\n", s.Name(), s.Settings())
	}
}

// ratio is the best mqlite side's figure over side p's, for scenario i.
func (r *Result) ratio(i int, mq []int, p int, latency bool) string {
	pc := r.cells[i][p]
	if pc.err != nil || (len(pc.rates) == 0 && len(pc.p99) == 0) {
		return "—"
	}
	best, name := 0.0, ""
	for _, j := range mq {
		c := r.cells[i][j]
		if c.err != nil || (len(c.rates) == 0 && len(c.p99) == 0) {
			continue
		}
		var v float64
		if latency {
			v = median(pc.p99) / median(c.p99)
		} else {
			v = median(c.rates) / median(pc.rates)
		}
		if v > best {
			best, name = v, r.sides[j].Name()
		}
	}
	if name == "" {
		return "—"
	}
	return fmt.Sprintf("%.2f (%s)", best, strings.TrimPrefix(name, "mqlite "))
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func commas(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// procCPU is the CPU time (user plus system) of process pid so far, from
// /proc/PID/stat (clock ticks of 10 ms); 0 when unknown.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// pidOf finds the process whose command name is comm (the local RabbitMQ's
// beam.smp, the local nats-server); 0 when none or several.
func pidOf(comm string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if found != 0 {
			return 0
		}
		found = pid
	}
	return found
}

// sideNames are the sides' short names for -sides.
// sideNames are the names -sides takes. mqlite-stream is the stream
// column alone, on a broker of its own: what a profile of the stream
// (MQLITE_BENCH_CPUPROFILE) is taken on; the default runs mqlite.
func sideNames() []string { return []string{"mqlite", "mqlite-stream", "rabbitmq", "jetstream"} }

// openSides opens the sides named by only (all when empty). A side whose
// server is unreachable is skipped with the reason, unless
// MQLITE_REQUIRE_SERVICES=1.
func openSides(ctx context.Context, only string, sz Sizes) (sides []Side, skipped []string, err error) {
	want := func(name string) bool {
		if only == "" {
			return name != "mqlite-stream" // the default has it among mqlite's columns
		}
		return slices.Contains(strings.Split(only, ","), name)
	}
	require := os.Getenv("MQLITE_REQUIRE_SERVICES") == "1"
	add := func(name string, open func() ([]Side, error)) error {
		if !want(name) {
			return nil
		}
		ss, err := open()
		if err != nil {
			if require || strings.HasPrefix(name, "mqlite") {
				return fmt.Errorf("%s: %w", name, err)
			}
			skipped = append(skipped, fmt.Sprintf("%s (%v)", name, err))
			return nil
		}
		sides = append(sides, ss...)
		return nil
	}
	for _, o := range []struct {
		name string
		open func() ([]Side, error)
	}{
		{"mqlite", func() ([]Side, error) { return openMQLite(ctx, sz, receiveComplete, completeReceive, stream) }},
		{"mqlite-stream", func() ([]Side, error) { return openMQLite(ctx, sz, stream) }},
		{"rabbitmq", func() ([]Side, error) { return openRabbit(ctx, sz) }},
		{"jetstream", func() ([]Side, error) { return openJetStream(ctx, sz) }},
	} {
		if err := add(o.name, o.open); err != nil {
			for _, s := range sides {
				_ = s.Close()
			}
			return nil, nil, err
		}
	}
	return sides, skipped, nil
}
