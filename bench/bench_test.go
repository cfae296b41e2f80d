package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

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

func TestPercentileAndMedian(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 3}, {99, 5}, {0, 1}, {20, 1}, {21, 2}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
	if got := commas(1234567); got != "1,234,567" {
		t.Errorf("commas = %q", got)
	}
}
