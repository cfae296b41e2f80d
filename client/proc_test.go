package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/loadtest"
)

// The broker as a process of its own, for the benchmarks (its resident
// memory) and the SIGKILL crash test: this test binary re-executed with
// TestBrokerProcess and envBrokerDB set.
const (
	envBrokerDB     = "MQLITE_BROKER_PROC_DB"
	envBrokerAddr   = "MQLITE_BROKER_PROC_ADDR"
	envBrokerBudget = "MQLITE_BROKER_PROC_MAX_RESPONSE"  // broker.Config.MaxResponseBytes
	envBrokerWrite  = "MQLITE_BROKER_PROC_WRITE_TIMEOUT" // broker.Config.WriteTimeout
	procPrefix      = "BROKER "
)

// TestBrokerProcess is the broker process; it does nothing unless a test
// started it. It serves the file until SIGTERM (or a SIGKILL).
func TestBrokerProcess(t *testing.T) {
	path := os.Getenv(envBrokerDB)
	if path == "" {
		t.Skip("runs only as a broker process started by a test")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	st, err := mqlite.Open(ctx, path, mqlite.Config{ReaperInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	budget, _ := strconv.ParseInt(os.Getenv(envBrokerBudget), 10, 64)
	write, _ := time.ParseDuration(os.Getenv(envBrokerWrite))
	srv, err := broker.New(broker.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxResponseBytes: budget, WriteTimeout: write})
	if err != nil {
		t.Fatal(err)
	}
	addr := os.Getenv(envBrokerAddr)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%shttp://%s\n", procPrefix, ln.Addr())
	if err := srv.Serve(ctx, ln); err != nil {
		t.Fatal(err)
	}
}

// brokerProc is a running broker process.
type brokerProc struct {
	cmd *exec.Cmd
	url string
}

// startBroker starts a broker process on path (at addr, or any port), with
// env's extra variables.
func startBroker(t testing.TB, path, addr string, env ...string) *brokerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokerProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envBrokerDB+"="+path, envBrokerAddr+"="+addr), env...)
	line := loadtest.StartProcess(t, cmd, procPrefix)
	return &brokerProc{cmd: cmd, url: strings.TrimPrefix(line, procPrefix)}
}

// kill SIGKILLs the process and waits for it.
func (p *brokerProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// stop SIGTERMs the process and waits for it to drain and exit.
func (p *brokerProc) stop(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("broker process: %v", err)
	}
}

// rss is the process's resident memory in bytes (Linux).
func (p *brokerProc) rss() int64 { return p.status("VmRSS:") }

// peakRSS is the most resident memory the process has had (Linux's high
// water mark): exact, where sampling rss could miss a short peak.
func (p *brokerProc) peakRSS() int64 { return p.status("VmHWM:") }

// status reads a field in kB of the process's /proc status, in bytes.
func (p *brokerProc) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpu is the CPU time (user plus system) the process has used so far
// (Linux: utime and stime of /proc/PID/stat, in clock ticks of 10 ms).
func (p *brokerProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name in parentheses may hold spaces: split after it.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// prepareFile creates the store file with queues and returns an admin key.
func prepareFile(t testing.TB, path string, queues ...string) string {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range queues {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{LockDuration: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	_, secret, err := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}
