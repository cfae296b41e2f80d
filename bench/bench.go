package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mqlite/mqlite/bench/internal/measure"
	"github.com/mqlite/mqlite/internal/testdb"
)

// BodySize is the size of every message body.
const BodySize = 256

// Sizes is how much work each scenario does in one run.
type Sizes struct {
	// Send1 and Send100 are the messages sent one per transaction and 100
	// per transaction.
	Send1, Send100 int
	// Drain1 and Drain100 are the backlogs drained one at a time and in
	// batches of 100.
	Drain1, Drain100 int
	// Latency is how many messages the latency scenario sends, at Rate per
	// second on average (Poisson arrivals).
	Latency int
	Rate    float64
	// Runs is how many times each cell is measured; the table shows the
	// median.
	Runs int
}

// FullSizes are the sizes docs/benchmark.md reports (make bench).
var FullSizes = Sizes{Send1: 2000, Send100: 20000, Drain1: 2000, Drain100: 10000, Latency: 100, Rate: 20, Runs: 3}

// SmokeSizes prove that every peer runs every scenario, in seconds.
var SmokeSizes = Sizes{Send1: 10, Send100: 100, Drain1: 10, Drain100: 100, Latency: 5, Rate: 200, Runs: 1}

// Instance is one peer on one fresh file.
type Instance interface {
	// Send sends bodies in one transaction, as the peer's API does it.
	Send(ctx context.Context, bodies [][]byte) error
	// Drain consumes n messages already in the queue, batch at a time (1 or
	// 100), each batch settled as the peer settles it.
	Drain(ctx context.Context, n, batch int) error
	// Latency sends one message at each offset of at (from the start), each
	// in its own transaction, to the peer's idiomatic consumer, and returns
	// for each the time from just before its transaction began to the start
	// of its handler.
	Latency(ctx context.Context, at []time.Duration) ([]time.Duration, error)
	// DB is the handle the peer runs on, for the WAL measurement.
	DB() *sql.DB
	Close() error
}

// Peer is a library under comparison.
type Peer struct {
	Name string
	// Open opens the peer on a fresh file at path.
	Open func(ctx context.Context, path string) (Instance, error)
	// NoLatency is set for a peer without a consumer of its own.
	NoLatency bool
}

// Settings are the connection settings every peer gets: WAL, synchronous
// NORMAL, a 5 s busy timeout, one open connection, automatic checkpoints
// at SQLite's default (1000 pages). mqlite sets the same on its own.
const Settings = "_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_txlock=immediate"

// openSQLite opens path with Settings on modernc.org/sqlite's "sqlite"
// driver, with one connection.
func openSQLite(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?"+Settings)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, err), db.Close())
	}
	return db, nil
}

// scenario is one row of the table.
type scenario struct {
	name string
	unit string // of the cell
	// run measures one run on a fresh instance; NaN means not applicable.
	run func(ctx context.Context, p Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error)
	// latency scenarios give two cells (p50, p99) from one run.
	p99 bool
}

func scenarios() []scenario {
	return []scenario{
		{name: "send, 1 per tx", unit: "msgs/s", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return sendRate(ctx, in, bodies(rng, sz.Send1), 1)
		}},
		{name: "send, 100 per tx", unit: "msgs/s", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return sendRate(ctx, in, bodies(rng, sz.Send100), 100)
		}},
		{name: "drain, 1 at a time", unit: "msgs/s", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return drainRate(ctx, in, bodies(rng, sz.Drain1), 1)
		}},
		{name: "drain, 100 per tx", unit: "msgs/s", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return drainRate(ctx, in, bodies(rng, sz.Drain100), 100)
		}},
		{name: "send→handler p50", unit: "ms", p99: true, run: nil},
		{name: "WAL per msg, 1 per tx", unit: "bytes", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return walPerMessage(ctx, in, bodies(rng, min(sz.Send1, 500)), 1)
		}},
		{name: "WAL per msg, 100 per tx", unit: "bytes", run: func(ctx context.Context, _ Peer, in Instance, sz Sizes, rng *rand.Rand) (float64, error) {
			return walPerMessage(ctx, in, bodies(rng, min(sz.Send100, 5000)), 100)
		}},
	}
}

// bodies returns n distinct random bodies of BodySize bytes.
func bodies(rng *rand.Rand, n int) [][]byte { return measure.Bodies(rng, n, BodySize) }

func sendAll(ctx context.Context, in Instance, bs [][]byte, per int) error {
	return measure.SendAll(ctx, in.Send, bs, per)
}

func sendRate(ctx context.Context, in Instance, bs [][]byte, per int) (float64, error) {
	return measure.SendRate(ctx, in.Send, bs, per)
}

func drainRate(ctx context.Context, in Instance, bs [][]byte, batch int) (float64, error) {
	if err := sendAll(ctx, in, bs, 100); err != nil { // the backlog, not timed
		return 0, err
	}
	start := time.Now()
	if err := in.Drain(ctx, len(bs), batch); err != nil {
		return 0, err
	}
	return float64(len(bs)) / time.Since(start).Seconds(), nil
}

// walPerMessage is the WAL each message sent writes, with the instance's
// real settings (automatic checkpoints on): the frames its commits append,
// counted from the wal-index header after every transaction (a checkpoint
// that restarts the WAL from its start is seen by its salt), times the
// frame size of the file's page size.
func walPerMessage(ctx context.Context, in Instance, bs [][]byte, per int) (float64, error) {
	// One message first, so that the schema's first pages are not counted.
	if err := in.Send(ctx, bs[:1]); err != nil {
		return 0, err
	}
	var path string
	if err := in.DB().QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
		return 0, fmt.Errorf("database path: %w", err)
	}
	var pageSize int64
	if err := in.DB().QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return 0, fmt.Errorf("page size: %w", err)
	}
	wal, err := testdb.OpenWALCounter(path)
	if err != nil {
		return 0, err
	}
	defer wal.Close()
	for rest := bs[1:]; len(rest) > 0; {
		n := min(per, len(rest))
		if err := in.Send(ctx, rest[:n]); err != nil {
			return 0, err
		}
		wal.Step()
		rest = rest[n:]
	}
	const frameHeader = 24
	return float64(wal.Frames*(pageSize+frameHeader)) / float64(len(bs)-1), nil
}

// Result holds every run of every cell: Cells[row][peer].
type Result struct {
	Peers []string
	Rows  []string
	Units []string
	Cells [][][]float64
}

// Run measures every scenario for every peer sz.Runs times, on a fresh file
// in dir each time. Within a run the peers take turns, in an order that
// rotates from run to run, so that a slow spell of the machine does not
// land on one peer. progress, when not nil, gets a line per measurement.
func Run(ctx context.Context, dir string, peers []Peer, sz Sizes, progress io.Writer) (*Result, error) {
	scs := scenarios()
	res := &Result{}
	for _, p := range peers {
		res.Peers = append(res.Peers, p.Name)
	}
	for _, sc := range scs {
		res.Rows = append(res.Rows, sc.name)
		res.Units = append(res.Units, sc.unit)
		if sc.p99 {
			res.Rows = append(res.Rows, "send→handler p99")
			res.Units = append(res.Units, sc.unit)
		}
	}
	res.Cells = make([][][]float64, len(res.Rows))
	for i := range res.Cells {
		res.Cells[i] = make([][]float64, len(peers))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fileN := 0
	for run := range sz.Runs {
		row := 0
		for _, sc := range scs {
			for k := range peers {
				pi := (k + run) % len(peers)
				p := peers[pi]
				fileN++
				path := filepath.Join(dir, fmt.Sprintf("%03d-%s.db", fileN, strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "").Replace(p.Name)))
				v, v99, err := measureOne(ctx, p, path, sc, sz, rng)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, run %d: %w", p.Name, sc.name, run+1, err)
				}
				res.Cells[row][pi] = append(res.Cells[row][pi], v)
				if sc.p99 {
					res.Cells[row+1][pi] = append(res.Cells[row+1][pi], v99)
				}
				if progress != nil {
					fmt.Fprintf(progress, "run %d  %-24s %-26s %12.2f", run+1, sc.name, p.Name, v)
					if sc.p99 {
						fmt.Fprintf(progress, "  p99 %.2f", v99)
					}
					fmt.Fprintln(progress)
				}
				if err := removeDB(path); err != nil {
					return nil, err
				}
			}
			row++
			if sc.p99 {
				row++
			}
		}
	}
	return res, nil
}

func measureOne(ctx context.Context, p Peer, path string, sc scenario, sz Sizes, rng *rand.Rand) (v, v99 float64, err error) {
	if sc.p99 && p.NoLatency {
		return math.NaN(), math.NaN(), nil
	}
	in, err := p.Open(ctx, path)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	if !sc.p99 {
		v, err = sc.run(ctx, p, in, sz, rng)
		return v, 0, err
	}
	lat, err := in.Latency(ctx, measure.Arrivals(rng, sz.Latency, sz.Rate))
	if err != nil {
		return 0, 0, err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(measure.Percentile(lat, 50)), ms(measure.Percentile(lat, 99)), nil
}

func removeDB(path string) error {
	var errs []error
	for _, suffix := range []string{"", "-wal", "-shm", ".lock"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Markdown writes the table of medians.
func (r *Result) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| median of %d runs | unit | %s |\n", r.runs(), strings.Join(r.Peers, " | "))
	fmt.Fprintf(&b, "|---|---|%s\n", strings.Repeat("--:|", len(r.Peers)))
	for i, row := range r.Rows {
		cells := make([]string, len(r.Peers))
		for j := range r.Peers {
			cells[j] = measure.Cell(measure.Median(r.Cells[i][j]), r.Units[i])
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row, r.Units[i], strings.Join(cells, " | "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) runs() int {
	n := 0
	for _, row := range r.Cells {
		for _, c := range row {
			n = max(n, len(c))
		}
	}
	return n
}
