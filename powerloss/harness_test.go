package powerloss_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // the "sqlite" driver, to look at a file as the cut left it

	"github.com/mqlite/mqlite/powerloss/forgetfs"
	"github.com/mqlite/mqlite/powerloss/internal/fusetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(m.Run()) // a worker is SIGKILLed; nothing to verify
	}
	goleak.VerifyTestMain(m)
}

// The worker protocol: the harness re-executes the test binary with
// TestWorker and the environment below; the worker opens its store on the
// mount, says what it did on stdout, one line per commit that returned,
// and runs until the power is cut and the harness SIGKILLs it.
const (
	envWorker = "MQLITE_POWERLOSS_WORKER" // the scenario; set only in a worker
	envDB     = "MQLITE_POWERLOSS_DB"     // the store's path on the mount
	envSeed   = "MQLITE_POWERLOSS_SEED"
	envSync   = "MQLITE_POWERLOSS_SYNC" // "full" or "normal"
	envCycle  = "MQLITE_POWERLOSS_CYCLE"
	linePre   = "PL "
)

// cutsWanted is how many power cuts a scenario makes: short in make test,
// MQLITE_POWERLOSS_CUTS in make crash.
func cutsWanted(short int) int {
	if n, err := strconv.Atoi(os.Getenv("MQLITE_POWERLOSS_CUTS")); err == nil && n > 0 {
		return n
	}
	return short
}

// syncModes runs fn as two parallel subtests, "full" and "normal", with
// full telling which.
func syncModes(t *testing.T, fn func(t *testing.T, name string, full bool)) {
	for _, full := range []bool{true, false} {
		name := syncName(full)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, name, full)
		})
	}
}

func syncName(full bool) string {
	if full {
		return "full"
	}
	return "normal"
}

// seeded returns the run's seed, logged (MQLITE_POWERLOSS_SEED replays
// it), and a generator on it for stream.
func seeded(t *testing.T, stream uint64) (uint64, *rand.Rand) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (%s=%d replays it)", seed, envSeed, seed)
	return seed, rand.New(rand.NewPCG(seed, stream))
}

// TestWorker is the worker process; it does nothing unless the harness
// started it.
func TestWorker(t *testing.T) {
	kind := os.Getenv(envWorker)
	if kind == "" {
		t.Skip("runs only as a power-loss worker process")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	cycle, _ := strconv.Atoi(os.Getenv(envCycle))
	w := workerEnv{path: os.Getenv(envDB), seed: seed, cycle: cycle, full: os.Getenv(envSync) == "full"}
	fn, ok := workers[kind]
	if !ok {
		t.Fatalf("no worker %q", kind)
	}
	err := fn(context.Background(), w)
	// After the cut every file operation fails: say so, and wait for the
	// kill, which the harness sends once it has seen the cut.
	say("stop %v", err)
	select {}
}

// workerEnv is what a worker is told.
type workerEnv struct {
	path  string
	seed  uint64
	cycle int
	full  bool
}

// workers are the scenarios' worker functions, by name. Each returns only
// on an error (the cut's EIO, normally).
var workers = map[string]func(ctx context.Context, w workerEnv) error{}

var sayMu sync.Mutex

// say writes one line for the harness, in one write: what the harness
// reads was said.
func say(format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Fprintf(os.Stdout, linePre+format+"\n", args...)
}

// rig is a store's folder and, between cuts, the forgetful mount over it.
type rig struct {
	t       *testing.T
	backing string
	fs      *forgetfs.FS
	mnt     string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, backing: backing}
}

// powerOn mounts the folder: the machine boots on what was synced.
func (r *rig) powerOn() { r.fs, r.mnt = fusetest.Mount(r.t, r.backing) }

// onMount and onDisk are a file's path through the mount (for workers) and
// in the folder (for the harness's checks, the power being off).
func (r *rig) onMount(name string) string { return filepath.Join(r.mnt, name) }
func (r *rig) onDisk(name string) string  { return filepath.Join(r.backing, name) }

// powerOff unmounts after a cut, once every worker is dead.
func (r *rig) powerOff() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.fs.Unmount(ctx); err != nil {
		r.t.Fatalf("unmount: %v", err)
	}
}

// proc is a running worker.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string // every complete line, closed at the worker's end
	stdin  io.WriteCloser
	stderr *tailBuffer
	cut    <-chan struct{}
}

// start starts a worker of kind on the rig's store file name.
func (r *rig) start(kind, name string, seed uint64, cycle int, full bool, env ...string) *proc {
	r.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorker$", "-test.count=1")
	sync := "normal"
	if full {
		sync = "full"
	}
	cmd.Env = append(os.Environ(), envWorker+"="+kind, envDB+"="+r.onMount(name), envSync+"="+sync,
		fmt.Sprintf("%s=%d", envSeed, seed), fmt.Sprintf("%s=%d", envCycle, cycle))
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	p := &proc{t: r.t, cmd: cmd, lines: make(chan string, 1<<16), stdin: stdin, stderr: &tailBuffer{}, cut: r.fs.Done()}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		rd := bufio.NewReader(stdout)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				// A last line without its newline was cut off by the kill.
				return
			}
			if rest, ok := strings.CutPrefix(line, linePre); ok {
				p.lines <- strings.TrimSuffix(rest, "\n")
			}
		}
	}()
	return p
}

// next returns the fields of the worker's next line.
func (p *proc) next() []string {
	p.t.Helper()
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("worker ended: %v\n%s", p.cmd.Wait(), p.stderr)
		}
		f := strings.Fields(line)
		p.check(f)
		return f
	case <-timeout.C:
		p.t.Fatalf("worker silent for 2 minutes\n%s", p.stderr)
		return nil
	}
}

// expect waits for the worker's line that starts with word, and returns
// its fields; lines before it are passed to keep.
func (p *proc) expect(word string, keep func([]string)) []string {
	p.t.Helper()
	for {
		f := p.next()
		if len(f) > 0 && f[0] == word {
			return f
		}
		if keep != nil {
			keep(f)
		}
	}
}

// tell sends the worker a line on its stdin (see waitFor).
func (p *proc) tell(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("tell worker %q: %v", line, err)
	}
}

// waitFor blocks a worker until the harness tells it word.
func waitFor(word string) error {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for %q: %w", word, err)
	}
	if got := strings.TrimSpace(line); got != word {
		return fmt.Errorf("told %q, waiting for %q", got, word)
	}
	return nil
}

// check fails the test on a worker that stopped before the power was cut.
func (p *proc) check(f []string) {
	p.t.Helper()
	if len(f) > 0 && f[0] == "stop" {
		select {
		case <-p.cut:
		default:
			p.t.Fatalf("worker stopped before the cut: %s\n%s", strings.Join(f, " "), p.stderr)
		}
	}
}

// kill SIGKILLs the worker (the power is off) and passes the lines it had
// written to keep.
func (p *proc) kill(keep func([]string)) {
	p.t.Helper()
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	for line := range p.lines {
		f := strings.Fields(line)
		p.check(f)
		if keep != nil {
			keep(f)
		}
	}
	var exit *exec.ExitError
	if err := p.cmd.Wait(); err != nil && !errors.As(err, &exit) {
		p.t.Fatalf("worker: %v", err)
	}
}

// waitCut waits for the armed cut, and fails if the worker ends first.
func (r *rig) waitCut(p *proc) {
	r.t.Helper()
	timeout := time.NewTimer(3 * time.Minute)
	defer timeout.Stop()
	select {
	case <-r.fs.Done():
	case <-timeout.C:
		r.t.Fatalf("no cut in 3 minutes (%d operations)\n%s", r.fs.Ops(), p.stderr)
	}
}

// tailBuffer keeps the last 8 KiB written to it: a worker's stderr.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > 8<<10 {
		b.b = b.b[len(b.b)-8<<10:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

var _ io.Writer = (*tailBuffer)(nil)

// integrity runs PRAGMA integrity_check on a file as the cut left it, with
// a plain connection (SQLite's own recovery of the WAL, nothing of mqlite).
// A file the cut took away entirely is reported as absent.
func integrity(t *testing.T, path string) (present bool) {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&res); err != nil {
		t.Fatalf("integrity_check of %s: %v", filepath.Base(path), err)
	}
	if res != "ok" {
		t.Fatalf("integrity_check of %s: %s", filepath.Base(path), res)
	}
	return true
}
