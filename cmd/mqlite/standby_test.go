package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// standbyServe runs `serve --standby` on path in this process and returns
// its stdout lines (read as they come, so the command never blocks on its
// output) and its exit code once it returns.
func standbyServe(t *testing.T, ctx context.Context, path string) (<-chan string, <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		c := run(ctx, []string{"serve", "--standby", "--db", path, "--addr", "127.0.0.1:0"}, strings.NewReader(""), pw, io.Discard)
		_ = pw.Close()
		code <- c
	}()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, code
}

// line returns the last word (the URL) of the next line that starts with
// prefix.
func line(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("no line starting with %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l[strings.LastIndex(l, " ")+1:]
			}
		case <-timeout:
			t.Fatalf("no line starting with %q within 30s", prefix)
		}
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestServeStandby: `serve --standby` answers at once, is not ready while
// another store holds the file, serves on the same address once it is
// released, and stops on SIGTERM (its ctx) whether waiting or serving.
func TestServeStandby(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		takeOver bool
	}{{"takes over", true}, {"stopped while waiting", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			primary, err := mqlite.Open(context.Background(), path, mqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer primary.Close()
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			out, code := standbyServe(t, ctx, path)
			url := line(t, out, "mqlite broker standby")
			if got := status(t, url+"/healthz"); got != http.StatusOK {
				t.Fatalf("standby /healthz %d, want 200", got)
			}
			if got := status(t, url+"/readyz"); got != http.StatusServiceUnavailable {
				t.Fatalf("standby /readyz %d, want 503", got)
			}
			if tc.takeOver {
				if err := primary.Close(); err != nil {
					t.Fatal(err)
				}
				if serving := line(t, out, "mqlite broker serving"); serving != url {
					t.Fatalf("serving on %s, want the standby's address %s", serving, url)
				}
				if got := status(t, url+"/readyz"); got != http.StatusOK {
					t.Fatalf("/readyz after the takeover %d, want 200", got)
				}
			}
			stop()
			select {
			case c := <-code:
				if c != 0 {
					t.Fatalf("exit code %d, want 0", c)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve --standby did not stop")
			}
		})
	}
}
