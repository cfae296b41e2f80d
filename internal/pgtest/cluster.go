package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ClusterDatabase is the database StartCluster creates; Cluster.URL names it.
const ClusterDatabase = "mqlite"

// serverUser is the OS user the server runs as when the tests run as root:
// PostgreSQL refuses to run as root, and Debian's packages create this user.
const serverUser = "postgres"

// readyTimeout bounds each wait for the server to accept connections
// (after a crash it first replays its write-ahead log), unless the test's
// deadline comes sooner.
const readyTimeout = 60 * time.Second

// stopTimeout bounds a clean shutdown before Stop kills the server.
const stopTimeout = 30 * time.Second

// Cluster is a PostgreSQL server of one test's own: its data folder is in
// a temporary folder, it listens on a free port of 127.0.0.1 only, and the
// test may kill it (SIGKILL) and start it again on the same data and port.
// Its settings keep a commit durable across a kill: fsync,
// synchronous_commit and full_page_writes are on. Its log goes to a file
// in its folder, whose tail is printed when the test fails.
//
// Its methods are safe for concurrent use. Start, Restart and Stop fail
// the test, and so must be called from the test's goroutine; Kill reports
// a failure with t.Errorf and may be called from any goroutine.
type Cluster struct {
	t        testing.TB
	postgres string              // the server's binary
	cred     *syscall.Credential // whom the server runs as; nil for the tests' own user
	dir      string              // the temporary folder: data, socket, log
	data     string
	logPath  string
	port     int

	mu  sync.Mutex // guards run, and orders Start, Kill and Stop
	run *serverRun // the server's process, nil while it is down
}

// serverRun is one run of the server's process.
type serverRun struct {
	cmd    *exec.Cmd
	pid    int           // the postmaster's, and its process group's
	exited chan struct{} // closed when the postmaster has exited and been reaped
	err    error         // the postmaster's exit, once exited is closed
}

// StartCluster makes a new PostgreSQL data folder (initdb) in a temporary
// folder, starts the server on a free port of 127.0.0.1, waits until it
// accepts connections, and creates ClusterDatabase in it. When t ends the
// server is stopped (killed if it does not stop in time) and the folder
// removed.
//
// When initdb or postgres cannot be found, or the tests run as root and
// there is no postgres user to run the server as, StartCluster skips t, or
// fails it under MQLITE_REQUIRE_SERVICES=1. It must be called from t's
// goroutine.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	initdb, err := findBinary("initdb")
	if err != nil {
		missingService(t, "PostgreSQL's initdb", err)
		return nil
	}
	postgres, err := findBinary("postgres")
	if err != nil {
		missingService(t, "PostgreSQL's postgres", err)
		return nil
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred, err = lookupCredential(serverUser)
		if err != nil {
			missingService(t, "a server of the test's own", fmt.Errorf(
				"the tests run as root, which PostgreSQL refuses, and the server would run as OS user %s: %w (create it, e.g. useradd --system %s)",
				serverUser, err, serverUser))
			return nil
		}
	}

	// Not t.TempDir: its parents are the tests' user's alone, and the
	// server's user must reach the folder.
	dir, err := os.MkdirTemp("", "mqlite-pg-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: remove the cluster's folder: %v", err)
		}
	})
	c := &Cluster{
		t:        t,
		postgres: postgres,
		cred:     cred,
		dir:      dir,
		data:     filepath.Join(dir, "data"),
		logPath:  filepath.Join(dir, "postgres.log"),
	}
	if err := c.own(dir); err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	// -N: initdb's own fsync of the fresh folder is skipped, which only
	// matters if the machine loses power before the test runs; the server
	// itself runs with fsync on.
	cmd := exec.Command(initdb, "-D", c.data, "-N", "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--locale=C")
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: the cluster's log (%s), its last lines:\n%s", c.logPath, c.logTail(60))
		}
	})
	t.Cleanup(c.Stop)

	// The free port is found by binding it and letting it go, so another
	// process may take it before the server binds it: try another then.
	for attempt := 1; ; attempt++ {
		c.port, err = freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		from := c.logSize()
		err = c.start()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(c.logSince(from), "could not bind") {
			t.Fatalf("pgtest: start the cluster: %v", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget(t, 30*time.Second))
	defer cancel()
	conn, err := connect(ctx, c.adminURL(), 5*time.Second)
	if err != nil {
		t.Fatalf("pgtest: connect to the cluster: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ClusterDatabase); err != nil {
		t.Fatalf("pgtest: create database %s in the cluster: %v", ClusterDatabase, err)
	}
	return c
}

// URL returns the URL of the cluster's database, ClusterDatabase. It stays
// the same across Kill, Start and Restart.
func (c *Cluster) URL() string { return c.urlOf(ClusterDatabase) }

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// PID returns the server's process id (the postmaster's), or 0 while the
// server is down.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return 0
	}
	return c.run.pid
}

// LogPath returns the path of the server's log file. The file is removed
// with the cluster's folder when the test ends.
func (c *Cluster) LogPath() string { return c.logPath }

// Start starts the server on the cluster's data folder and port, and waits
// until it accepts connections: after a Kill that includes replaying its
// write-ahead log. The wait is bounded by a minute, or less when the
// test's deadline comes sooner. The server must be down.
func (c *Cluster) Start() {
	c.t.Helper()
	if err := c.start(); err != nil {
		c.t.Fatalf("pgtest: start the cluster: %v", err)
	}
}

// Restart stops the server cleanly if it is up, then starts it as Start
// does. After a Kill it is Start.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Stop()
	c.Start()
}

// Kill kills the server as a crash would: SIGKILL to the postmaster and to
// all its children (its backends and helpers, which a killed postmaster
// would leave behind for a while, holding its shared memory), and waits
// until they are gone, so that Start can run the server again. Sessions
// open to it fail from then on. The server must be up; a failure is
// reported with t.Errorf.
func (c *Cluster) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.run
	if r == nil {
		c.t.Errorf("pgtest: kill the cluster: it is not running")
		return
	}
	c.run = nil
	if err := killServer(r); err != nil {
		c.t.Errorf("pgtest: kill the cluster: %v", err)
		return
	}
	c.t.Logf("pgtest: killed the cluster's postmaster (pid %d) and its children, port %d", r.pid, c.port)
}

// Stop shuts the server down cleanly (PostgreSQL's fast shutdown: open
// sessions are closed) and waits until it has exited; a server that has
// not stopped within 30 seconds is killed. A server that is down is left
// so. The cluster runs Stop when the test ends.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.run
	if r == nil {
		return
	}
	c.run = nil
	if err := syscall.Kill(r.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		c.t.Errorf("pgtest: stop the cluster: %v", err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-r.exited:
		// The postmaster exits after its children.
	case <-timer.C:
		c.t.Errorf("pgtest: the cluster did not stop within %v; killing it", stopTimeout)
		if err := killServer(r); err != nil {
			c.t.Errorf("pgtest: stop the cluster: %v", err)
		}
	}
}

// start runs the server and waits until it accepts connections.
func (c *Cluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil {
		return fmt.Errorf("it is already running (pid %d)", c.run.pid)
	}
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if err := c.own(c.logPath); err != nil {
		return err
	}
	settings := []string{
		"listen_addresses=127.0.0.1",
		"port=" + strconv.Itoa(c.port),
		"unix_socket_directories=" + c.dir,
		// A test that kills the server checks that what was committed
		// stays: these are PostgreSQL's defaults, said so that no
		// configuration of the machine changes them.
		"fsync=on",
		"synchronous_commit=on",
		"full_page_writes=on",
		"shared_buffers=16MB",
		"max_connections=100",
		"log_line_prefix=%m [%p] ",
		"logging_collector=off",
	}
	args := []string{"-D", c.data}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(c.postgres, args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr(c.cred)
	if err := cmd.Start(); err != nil {
		return err
	}
	r := &serverRun{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	c.run = r

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget(c.t, readyTimeout))
	defer cancel()
	if err := c.waitReady(ctx, r); err != nil {
		c.run = nil
		if kerr := killServer(r); kerr != nil {
			err = fmt.Errorf("%w; and killing it: %v", err, kerr)
		}
		return err
	}
	return nil
}

// waitReady waits until the server of r accepts connections and answers,
// r's process exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, r *serverRun) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		conn, err := connect(ctx, c.adminURL(), time.Second)
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		last = err
		select {
		case <-r.exited:
			return fmt.Errorf("postgres (pid %d) exited before it accepted connections: %v (see its log)", r.pid, r.err)
		case <-ctx.Done():
			return fmt.Errorf("postgres (pid %d) did not accept connections in time: %w; the last attempt: %v",
				r.pid, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// killServer kills the server of r as a crash would, and waits until its
// processes are gone. The postmaster's children do not share its process
// group: each makes a group of its own (so that the postmaster can signal
// a child with whatever it started). A killed postmaster leaves them
// running, holding its shared memory, until they notice; a new server
// refuses to start on that memory. So the postmaster is stopped first
// (SIGSTOP: it forks no more), its children and their groups are killed,
// then the postmaster and its group. Its pid cannot be reused meanwhile:
// it is not reaped until it has died.
func killServer(r *serverRun) error {
	select {
	case <-r.exited:
		// It exited on its own, after its children.
		return nil
	default:
	}
	if err := syscall.Kill(r.pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGSTOP postmaster %d: %w", r.pid, err)
	}
	procs, err := processes()
	if err != nil {
		return fmt.Errorf("list the postmaster's children: %w", err)
	}
	var children []process
	for _, p := range procs {
		if p.ppid == r.pid && !p.zombie {
			children = append(children, p)
		}
	}
	for _, p := range children {
		target := p.pid
		if p.pgrp == p.pid {
			target = -p.pid // the child and whatever it started
		}
		if err := syscall.Kill(target, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("SIGKILL postmaster %d's child %d: %w", r.pid, p.pid, err)
		}
	}
	if err := syscall.Kill(-r.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL process group %d: %w", r.pid, err)
	}

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case <-r.exited:
	case <-deadline.C:
		return fmt.Errorf("postmaster %d still runs 30s after SIGKILL", r.pid)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		left, err := survivors(r.pid, children)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-deadline.C:
			return fmt.Errorf("processes %v of postmaster %d still run 30s after SIGKILL", left, r.pid)
		case <-tick.C:
		}
	}
}

// survivors lists the processes still running (not zombies) of the
// postmaster's group and of its children's groups.
func survivors(postmaster int, children []process) ([]int, error) {
	groups := map[int]bool{postmaster: true}
	pids := map[int]bool{}
	for _, c := range children {
		pids[c.pid] = true
		if c.pgrp == c.pid {
			groups[c.pid] = true
		}
	}
	procs, err := processes()
	if err != nil {
		return nil, fmt.Errorf("list the processes left: %w", err)
	}
	var left []int
	for _, p := range procs {
		if !p.zombie && (pids[p.pid] || groups[p.pgrp]) {
			left = append(left, p.pid)
		}
	}
	return left, nil
}

// process is what killServer reads of a process.
type process struct {
	pid, ppid, pgrp int
	zombie          bool // exited, not yet reaped: it holds no memory, socket or file
}

// adminURL is the URL of the cluster's maintenance database.
func (c *Cluster) adminURL() string { return c.urlOf("postgres") }

// urlOf is the URL of database db of the cluster.
func (c *Cluster) urlOf(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// own gives path to the server's user, when the server runs as another.
func (c *Cluster) own(path string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
}

// logSize is the size of the server's log, 0 when there is none yet.
func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is the server's log from offset from on.
func (c *Cluster) logSince(from int64) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	return string(b[from:])
}

// logTail is the last n lines of the server's log.
func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a TCP port of 127.0.0.1 that nothing listened on a
// moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// debianRoot is the folder of Debian's PostgreSQL packages, one folder a
// version.
var debianRoot = "/usr/lib/postgresql"

// findBinary finds one of PostgreSQL's programs: on PATH, else in the
// folder Debian's packages install them in (the newest version's), which
// is not on PATH by default.
func findBinary(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	found, _ := filepath.Glob(filepath.Join(debianRoot, "*", "bin", name))
	slices.SortFunc(found, func(a, b string) int { return debianVersion(a) - debianVersion(b) })
	if len(found) > 0 {
		return found[len(found)-1], nil
	}
	return "", err
}

// debianVersion is the major version in a path of Debian's folder of
// PostgreSQL's programs, /usr/lib/postgresql/<version>/bin/<name>.
func debianVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// lookupCredential is the credential of OS user name, for a process
// started as root to run as that user (with no supplementary groups).
func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s's uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s's gid %q: %w", name, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
