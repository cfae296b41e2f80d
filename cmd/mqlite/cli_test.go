package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// binary builds the mqlite command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mqlite-cli-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "mqlite")
		buildOut, buildErr = exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

// cli runs the binary with env and args; it returns stdout and the exit code.
func cli(t *testing.T, env []string, stdin string, args ...string) (string, int) {
	t.Helper()
	stdout, stderr, code := cliErr(t, env, stdin, args...)
	if code != 0 {
		t.Logf("mqlite %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout, code
}

// cliErr runs the binary with env and args; it returns stdout, stderr and
// the exit code.
func cliErr(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// must runs the binary and fails unless it exits 0.
func mustCLI(t *testing.T, env []string, stdin string, args ...string) string {
	t.Helper()
	out, code := cli(t, env, stdin, args...)
	if code != 0 {
		t.Fatalf("mqlite %s: exit %d", strings.Join(args, " "), code)
	}
	return out
}

// scenario is the CLI walk through a queue's life: create a queue, send from
// a file, receive and complete, dead-letter and redrive, on whatever store
// env names.
func scenario(t *testing.T, env []string) {
	mustCLI(t, env, "", "queues", "create", "jobs", "--max-delivery", "3")
	out := mustCLI(t, env, "one\ntwo\nthree\nfour\n", "send", "jobs", "--file", "-")
	if !strings.Contains(out, "sent 4 messages from 4 lines") {
		t.Fatalf("send --file: %q", out)
	}
	out = mustCLI(t, env, "", "send", "jobs", "five", "--message-id", "m5", "--json")
	var res struct{ Seq int64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Seq != 5 {
		t.Fatalf("send --json: %q (%v)", out, err)
	}
	out = mustCLI(t, env, "", "receive", "jobs", "--max", "2", "--complete")
	if !strings.Contains(out, "one") || !strings.Contains(out, "two") || !strings.Contains(out, "completed 2") {
		t.Fatalf("receive --complete: %q", out)
	}
	out = mustCLI(t, env, "", "receive", "jobs", "--reject", "malformed")
	if !strings.Contains(out, "three") || !strings.Contains(out, "dead-lettered 1") {
		t.Fatalf("receive --reject: %q", out)
	}
	out = mustCLI(t, env, "", "dlq", "list", "jobs")
	if !strings.Contains(out, "malformed") || !strings.Contains(out, "three") {
		t.Fatalf("dlq list: %q", out)
	}
	out = mustCLI(t, env, "", "dlq", "redrive", "jobs")
	if !strings.Contains(out, "redrove 1") {
		t.Fatalf("dlq redrive: %q", out)
	}
	out = mustCLI(t, env, "", "stats", "jobs", "--json")
	var st struct{ Active, DeadLettered int64 }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Active != 3 || st.DeadLettered != 0 {
		t.Fatalf("stats: %q (%v)", out, err)
	}
	mustCLI(t, env, "", "queues", "create", "later")
	mustCLI(t, env, "", "send", "later", "parked", "--delay", "1h")
	if out = mustCLI(t, env, "", "receive", "later"); strings.Contains(out, "parked") {
		t.Fatalf("receive of a message scheduled an hour ahead: %q", out)
	}
	if out = mustCLI(t, env, "", "deliver-now", "later"); !strings.Contains(out, "made 1 scheduled messages due") {
		t.Fatalf("deliver-now: %q", out)
	}
	if out = mustCLI(t, env, "", "receive", "later", "--complete"); !strings.Contains(out, "parked") {
		t.Fatalf("receive after deliver-now: %q", out)
	}
	mustCLI(t, env, "", "topics", "create", "events")
	mustCLI(t, env, "", "subscriptions", "create", "events", "mail", "--subject-prefix", "order.")
	out = mustCLI(t, env, "", "send", "events", "e1", "--subject", "order.paid")
	if !strings.Contains(out, "sent seq") {
		t.Fatalf("send to a topic: %q", out)
	}
	out = mustCLI(t, env, "", "topics", "list")
	if !strings.Contains(out, "events") || !strings.Contains(out, "subject^=order.") {
		t.Fatalf("topics list: %q", out)
	}
	schedules(t, env)
	mustCLI(t, env, "", "queues", "create", "done")
	if out = mustCLI(t, env, "", "move", "jobs", "done", "--max", "2"); !strings.Contains(out, "moved 2 from jobs to done") {
		t.Fatalf("move: %q", out)
	}
	out = mustCLI(t, env, "", "stats", "done", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Active != 2 {
		t.Fatalf("stats after move: %q (%v)", out, err)
	}
	if _, code := cli(t, env, "", "move", "jobs"); code != 2 {
		t.Fatalf("move without a destination: exit %d, want 2", code)
	}
	if _, code := cli(t, env, "", "receive", "nope"); code != 1 {
		t.Fatalf("receive from an unknown queue: exit %d, want 1", code)
	}
	if _, code := cli(t, env, "", "receive"); code != 2 {
		t.Fatalf("receive without a queue: exit %d, want 2", code)
	}
}

// schedules walks the schedules commands: create, list, update, a bad
// cron refused, delete.
func schedules(t *testing.T, env []string) {
	out := mustCLI(t, env, "", "schedules", "create", "hourly", "--target", "jobs", "--every", "1h",
		"--body", "tick", "--prop", "k=v", "--json")
	var sc struct {
		Name    string
		Options struct {
			Target  string
			EveryMS int64 `json:"every_ms"`
		}
		NextAt time.Time `json:"next_at"`
	}
	if err := json.Unmarshal([]byte(out), &sc); err != nil || sc.Name != "hourly" || sc.Options.EveryMS != 3_600_000 || sc.NextAt.IsZero() {
		t.Fatalf("schedules create --json: %q (%v)", out, err)
	}
	mustCLI(t, env, "", "schedules", "update", "hourly", "--target", "jobs", "--cron", "0 9 * * 1-5", "--tz", "Europe/Paris")
	out = mustCLI(t, env, "", "schedules", "list")
	if !strings.Contains(out, "hourly") || !strings.Contains(out, "0 9 * * 1-5 (Europe/Paris)") {
		t.Fatalf("schedules list: %q", out)
	}
	// A usage error, whether the store or the broker finds it: exit 2.
	if _, code := cli(t, env, "", "schedules", "create", "bad", "--target", "jobs", "--cron", "61 * * * *"); code != 2 {
		t.Fatalf("schedules create with a bad cron: exit %d, want 2", code)
	}
	mustCLI(t, env, "", "schedules", "delete", "hourly")
	out = mustCLI(t, env, "", "schedules", "list", "--json")
	if !strings.Contains(out, `"schedules": []`) {
		t.Fatalf("schedules list after delete: %q", out)
	}
}

func TestCLIOnAFile(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "cli.db")
	scenario(t, []string{"MQLITE_DB=" + db, "MQLITE_URL="})
}

// TestCLIThroughABroker runs the same walk through `mqlite serve`, with the
// key made on the file first, then stops the broker with SIGTERM.
func TestCLIThroughABroker(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "cli.db")
	out := mustCLI(t, nil, "", "keys", "create", "--role", "admin", "--queue", "*", "--db", db, "--json")
	var created struct{ Secret string }
	if err := json.Unmarshal([]byte(out), &created); err != nil || !strings.HasPrefix(created.Secret, "mqlite_") {
		t.Fatalf("keys create: %q (%v)", out, err)
	}
	url, stop := serve(t, db)
	env := []string{"MQLITE_DB=", "MQLITE_URL=" + url, "MQLITE_KEY=" + created.Secret}
	scenario(t, env)

	// A wrong key is refused; the file is the broker's while it runs.
	if _, code := cli(t, []string{"MQLITE_DB=", "MQLITE_URL=" + url, "MQLITE_KEY=mqlite_bad"}, "", "queues", "list"); code != 1 {
		t.Errorf("bad key: exit %d, want 1", code)
	}
	if _, code := cli(t, []string{"MQLITE_URL="}, "", "queues", "list", "--db", db); code != 1 {
		t.Errorf("second opener of the file: exit %d, want 1", code)
	}
	// keys create prints the secret alone on stdout, the rest on stderr.
	out, errOut, code := cliErr(t, env, "", "keys", "create", "--role", "consumer", "--queue", "jobs")
	if code != 0 || !strings.HasPrefix(out, "mqlite_") || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "shown once") {
		t.Errorf("keys create through the broker: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	stderr := stop()
	if strings.Contains(stderr, created.Secret) {
		t.Error("the broker logged a key")
	}
	// The broker closed the store: the file opens again, with its messages.
	out = mustCLI(t, []string{"MQLITE_URL="}, "", "stats", "jobs", "--db", db, "--json")
	if !strings.Contains(out, `"active": 1`) { // 3 left by the scenario, 2 of them moved
		t.Errorf("after the broker: %s", out)
	}
}

// serve starts "mqlite serve" on db at a free loopback port and returns its
// URL, and stop, which SIGTERMs it, waits for it to exit cleanly and
// returns what it logged.
func serve(t *testing.T, db string) (url string, stop func() string) {
	t.Helper()
	srv := exec.Command(binary(t), "serve", "--db", db, "--addr", "127.0.0.1:0")
	srv.Env = append(os.Environ(), "MQLITE_URL=", "MQLITE_DB=", "MQLITE_KEY=")
	var stderr syncBuffer
	srv.Stderr = &stderr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		_ = srv.Wait()
		t.Fatalf("serve printed nothing: %s", stderr.String())
	}
	first := lines.Text()
	url = first[strings.LastIndex(first, " ")+1:]
	stopped := false
	stop = func() string {
		if stopped {
			return stderr.String()
		}
		stopped = true
		if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			for lines.Scan() {
			}
			done <- srv.Wait()
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-done
			t.Fatal("serve did not stop on SIGTERM")
		}
		return stderr.String()
	}
	t.Cleanup(func() { stop() })
	return url, stop
}
