package pgmulti_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// The worker processes: this test binary, re-executed with TestWorker and
// the role, URL and arguments in the environment. A worker says what it
// did on stdout, one line each, prefixed linePrefix, and takes commands on
// stdin, one a line.

const (
	envRole    = "MQLITE_PGMULTI_ROLE" // set only in a worker
	envURL     = "MQLITE_PGMULTI_URL"
	envArgs    = "MQLITE_PGMULTI_ARGS" // the role's arguments, space-separated
	linePrefix = "PGMULTI "
	// lineTimeout bounds each wait for a worker's next line: far longer
	// than any step takes, so that a hung worker fails the test instead of
	// its timeout.
	lineTimeout = 30 * time.Second
)

// proc is a running worker.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // closed at the worker's end of output
	mu    sync.Mutex
	out   []string // the worker's other output (go test's), for a failure
}

// failed fails t with the worker's exit and its own output.
func (p *proc) failed(t *testing.T, err error) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Fatalf("%s exited with %v:\n%s", p.name, err, strings.Join(p.out, ""))
}

// start runs the worker role on the store at url with args, and waits
// until it says "ready".
func start(t *testing.T, name, role, url string, args ...string) *proc {
	t.Helper()
	p := launch(t, name, role, url, args...)
	p.expect(t, "ready")
	return p
}

// launch runs the worker role on the store at url with args.
func launch(t *testing.T, name, role, url string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorker$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRole+"="+role, envURL+"="+url, envArgs+"="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16)}
	go func() {
		defer close(p.lines)
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if rest, ok := strings.CutPrefix(line, linePrefix); ok && err == nil {
				p.lines <- strings.TrimSuffix(rest, "\n")
			} else if line != "" {
				p.mu.Lock()
				p.out = append(p.out, line) // the worker's own test output: its failure
				p.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // a worker the test left running
		_ = p.cmd.Wait()
	})
	return p
}

// next returns the worker's next line; it fails t when the worker ends or
// says nothing for lineTimeout.
func (p *proc) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.failed(t, p.cmd.Wait())
		}
		return l
	case <-time.After(lineTimeout):
		t.Fatalf("%s said nothing for %v", p.name, lineTimeout)
		return ""
	}
}

// expect reads the next line, which must start with word, and returns its
// fields after it.
func (p *proc) expect(t *testing.T, word string) []string {
	t.Helper()
	f := strings.Fields(p.next(t))
	if len(f) == 0 || f[0] != word {
		t.Fatalf("%s said %q, want %s", p.name, strings.Join(f, " "), word)
	}
	return f[1:]
}

// tell writes a command line to the worker.
func (p *proc) tell(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("tell %s %q: %v", p.name, line, err)
	}
}

// finish closes the worker's stdin (its stop), waits for it to exit
// cleanly and returns every line it said that the test had not read.
func (p *proc) finish(t *testing.T) []string {
	t.Helper()
	_ = p.stdin.Close()
	var rest []string
	timeout := time.After(lineTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				if err := p.cmd.Wait(); err != nil {
					p.failed(t, err)
				}
				return rest
			}
			rest = append(rest, l)
		case <-timeout:
			t.Fatalf("%s did not stop in %v", p.name, lineTimeout)
		}
	}
}

// worker is what a worker process has: its store, its arguments, and its
// commands from the harness.
type worker struct {
	t    *testing.T
	st   *mqlite.Store
	url  string
	args []string
	cmds chan string // closed when the harness closes stdin
	mu   sync.Mutex  // one line at a time on stdout
}

// say writes one line for the harness, after everything it reports was done.
func (w *worker) say(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(os.Stdout, linePrefix+format+"\n", args...)
}

// arg is the i-th argument as a number.
func (w *worker) arg(i int) int {
	n, err := strconv.Atoi(w.args[i])
	if err != nil {
		w.t.Fatalf("argument %d %q: %v", i, w.args[i], err)
	}
	return n
}

// stopped returns a context that ends when the harness closes stdin.
func (w *worker) stopped() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for range w.cmds { // a role that reads commands does not call stopped
		}
		cancel()
	}()
	return ctx
}

// workerConfig is the store's configuration in a worker: the sweeps often,
// so that a lapsed lease comes back soon.
func workerConfig() mqlite.Config {
	return mqlite.Config{
		ReaperInterval: 50 * time.Millisecond, SchedulerInterval: 50 * time.Millisecond,
		TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	}
}

// TestWorker is the worker process; it does nothing unless a harness
// started it.
func TestWorker(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("runs only as a worker process of the multi-process test")
	}
	run, ok := roles[role]
	if !ok {
		t.Fatalf("unknown role %q", role)
	}
	cfg := workerConfig()
	if role != roleSchedule {
		cfg.ScheduleInterval = -1 // only the schedule workers fire
	}
	if role == roleWaiter {
		// No sweep of its own wakes the waiter: only another process's
		// commit (NOTIFY), or the polling while its listener is down.
		cfg.ReaperInterval, cfg.SchedulerInterval = -1, -1
	}
	url := os.Getenv(envURL)
	st, err := mqlite.Open(context.Background(), url, cfg)
	if err != nil {
		t.Fatalf("worker open: %v", err)
	}
	defer st.Close()
	w := &worker{t: t, st: st, url: url, args: strings.Fields(os.Getenv(envArgs)), cmds: make(chan string)}
	go func() {
		defer close(w.cmds)
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			w.cmds <- s.Text()
		}
	}()
	w.say("ready")
	run(w)
}

// openHarness opens the harness's own store on url: it creates the queues
// and sends, and fires no schedule.
func openHarness(t *testing.T, url string) *mqlite.Store {
	t.Helper()
	cfg := workerConfig()
	cfg.ScheduleInterval = -1
	st, err := mqlite.Open(context.Background(), url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil && !errors.Is(err, mqlite.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return st
}
