package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// goqite's jobs.Runner starts a lease extender per job that sleeps
		// 4 s before it looks at the job's ctx: it outlives the job and the
		// runner's Stop. Nothing of ours can wait for it.
		goleak.IgnoreAnyFunction("maragu.dev/goqite/jobs.(*Runner).receiveAndRun.func1.3"))
}

// TestSmoke runs every scenario for every peer at SmokeSizes, one run: it
// proves the benchmark runs, not how fast anything is.
func TestSmoke(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"-short"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, p := range Peers() {
		if !strings.Contains(out, p.Name) {
			t.Errorf("table lacks peer %q:\n%s", p.Name, out)
		}
	}
	for _, row := range []string{"send, 1 per tx", "drain, 100 per tx", "send→handler p99", "WAL per msg, 100 per tx"} {
		if !strings.Contains(out, "| "+row+" |") {
			t.Errorf("table lacks row %q:\n%s", row, out)
		}
	}
}
