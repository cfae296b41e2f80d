package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/internal/testdb"
)

// serveUntilServing runs `mqlite serve args...` in this process until it
// returns, or until it prints that it serves (then it is stopped). It
// returns the exit code, whether it served, and its stdout and stderr.
func serveUntilServing(t *testing.T, args ...string) (code int, served bool, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errBuf testdb.Buffer
	done := make(chan int, 1)
	go func() {
		c := run(ctx, append([]string{"serve", "--db", filepath.Join(t.TempDir(), "s.db")}, args...), strings.NewReader(""), pw, &errBuf)
		_ = pw.Close()
		done <- c
	}()
	out, err := io.ReadAll(readUntil(pr, "serving", cancel))
	if err != nil {
		t.Fatal(err)
	}
	code = <-done
	return code, strings.Contains(string(out), "serving"), string(out), errBuf.String()
}

// readUntil copies r, calling stop once a line with marker has gone by.
func readUntil(r io.Reader, marker string, stop func()) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		var seen strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			seen.Write(buf[:n])
			_, _ = pw.Write(buf[:n])
			if strings.Contains(seen.String(), marker) {
				stop()
			}
			if err != nil {
				_ = pw.Close()
				return
			}
		}
	}()
	return pr
}

// TestServePlainHTTPOffLoopback : serve refuses plain
// HTTP on an address other than loopback unless --allow-plain-http says
// so, and then warns on stderr; a TLS certificate that does not load fails
// serve before it says it serves.
func TestServePlainHTTPOffLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		args      []string
		wantCode  int
		served    bool
		wantError string
	}{
		{"loopback", []string{"--addr", "127.0.0.1:0"}, 0, true, ""},
		{"every interface", []string{"--addr", "0.0.0.0:0"}, 2, false, "--allow-plain-http"},
		{"every interface, said so", []string{"--addr", "0.0.0.0:0", "--allow-plain-http"}, 0, true, "clear text"},
		{"missing certificate", []string{"--addr", "127.0.0.1:0", "--tls-cert", "nope.pem", "--tls-key", "nope-key.pem"}, 1, false, "nope.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, served, stdout, stderr := serveUntilServing(t, tc.args...)
			if code != tc.wantCode || served != tc.served {
				t.Errorf("exit %d, served %v; want %d, %v\nstdout: %s\nstderr: %s", code, served, tc.wantCode, tc.served, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.wantError) {
				t.Errorf("stderr %q, want it to mention %q", stderr, tc.wantError)
			}
			if tc.wantError == "" && strings.Contains(stderr, "clear text") {
				t.Errorf("a warning on loopback: %s", stderr)
			}
		})
	}
}
