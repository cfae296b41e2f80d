package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestMain is also the broker process of the mqlite side (serveEnv).
func TestMain(m *testing.M) {
	if path := os.Getenv(serveEnv); path != "" {
		os.Exit(serveMQLite(path, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs every scenario at tiny sizes on every side whose server
// is reachable (under MQLITE_REQUIRE_SERVICES=1, every side must be): it
// proves the cells run, it measures nothing.
func TestSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := realMain([]string{"-short"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, sc := range scenarios() {
		if !strings.Contains(out.String(), "| "+sc.name+" |") {
			t.Errorf("no row %q in:\n%s", sc.name, out.String())
		}
	}
	t.Log(out.String())
}

func TestMedianAndCommas(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {nil, 0}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := commas(in); got != want {
			t.Errorf("commas(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestLoopPrefetch: the Loop of a stream of window streams exactly window
// messages: Concurrency 1 plus its Prefetch (-1 is none).
func TestLoopPrefetch(t *testing.T) {
	for window, want := range map[int]int{1: -1, 2: 1, 100: 99} {
		if got := loopPrefetch(window); got != want {
			t.Errorf("loopPrefetch(%d) = %d, want %d", window, got, want)
		}
	}
}
