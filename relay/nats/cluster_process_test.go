package nats_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A node of a cluster of processes (startCluster) is a child process:
// this test binary re-executed as TestClusterNodeWorker, which runs one
// nats-server until its stdin closes. The harness SIGKILLs it, so that a
// leader goes without the step-down a Shutdown does first (Shutdown hands
// every Raft group it leads to a follower before it stops).

const envClusterNode = "MQLITE_CLUSTER_NODE" // the node's nodeConfig as JSON; set only in the child

// nodeConfig is what a node process needs: its name, store, ports and the
// other nodes' route URLs.
type nodeConfig struct {
	Name, Dir         string
	Port, Route, HTTP int
	Routes            string
}

// options returns the server options of the node cfg describes.
func (cfg nodeConfig) options() *server.Options {
	return &server.Options{
		ServerName: cfg.Name, Host: "127.0.0.1", Port: cfg.Port, HTTPHost: "127.0.0.1", HTTPPort: cfg.HTTP,
		JetStream: true, StoreDir: cfg.Dir, NoLog: true, NoSigs: true,
		Cluster: server.ClusterOpts{Name: "mqlite-test", Host: "127.0.0.1", Port: cfg.Route},
		Routes:  server.RoutesFromStr(cfg.Routes),
	}
}

// TestClusterNodeWorker is a node process; it does nothing unless a
// cluster of processes started it. It serves until its stdin closes (the
// harness, or its death) and is normally SIGKILLed before.
func TestClusterNodeWorker(t *testing.T) {
	raw := os.Getenv(envClusterNode)
	if raw == "" {
		t.Skip("runs only as a node process of a cluster of processes")
	}
	var cfg nodeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(cfg.options())
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer shutdown(s)
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatalf("node %s not ready", cfg.Name)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startProcess starts n as a child process and waits until it takes
// client connections.
func (c *cluster) startProcess(n *node) {
	c.t.Helper()
	raw, err := json.Marshal(c.config(n))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterNodeWorker$", "-test.count=1")
	cmd.Env = append(os.Environ(), envClusterNode+"="+string(raw))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	n.proc, n.stdin = cmd, stdin
	c.mu.Unlock()
	c.waitFor("node "+n.name+" to take connections", func() bool {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// kill SIGKILLs n's process and reaps it.
func kill(cmd *exec.Cmd, stdin io.Closer) {
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait() // killed: the error says so
	_ = stdin.Close()
}

// monitor asks the nodes' monitoring endpoints, with no connection kept.
var monitor = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// leadsMeta reports whether n's monitoring endpoint says that n leads the
// JetStream meta group; false when it cannot be asked.
func leadsMeta(n *node) bool {
	resp, err := monitor.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.http))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&jsz); err != nil || jsz.Meta == nil {
		return false
	}
	return jsz.Meta.Leader == n.name
}
