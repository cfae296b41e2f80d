package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// runIn runs the CLI in this process with stdin, a fake terminal answer
// for every stream (terminal), and returns stdout, stderr and the exit
// code.
func runIn(t *testing.T, stdin string, terminal bool, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	g := &globals{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
		terminal: func(any) bool { return terminal }}
	code := execute(context.Background(), g, args)
	return stdout.String(), stderr.String(), code
}

// newStore makes a store at a fresh path with the queue orders holding
// two messages, and returns its --db flag pair.
func newStore(t *testing.T) []string {
	t.Helper()
	db := []string{"--db", filepath.Join(t.TempDir(), "app.db")}
	for _, args := range [][]string{
		{"queues", "create", "orders", "--max-delivery", "5", "--lock", "1m", "--dedup-by-body", "--dlq-max-count", "7"},
		{"send", "orders", `{"id":1}`},
		{"send", "orders", "\xff\xfe binary"},
	} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	return db
}

// TestHelpNeverPrintsTheKey: with MQLITE_KEY (and the others) set, no
// command's --help shows the value, only that the variable is set.
func TestHelpNeverPrintsTheKey(t *testing.T) {
	const secret = "mqlite_s3cr3t-never-shown"
	t.Setenv("MQLITE_KEY", secret)
	t.Setenv("MQLITE_URL", "http://127.0.0.1:1/url-never-shown")
	t.Setenv("MQLITE_DB", "db-never-shown.db")
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(newRoot(&globals{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}), nil)
	if len(paths) < 30 {
		t.Fatalf("walked %d commands, want every one", len(paths))
	}
	for _, p := range paths {
		out, errOut, code := runIn(t, "", false, append(p, "--help")...)
		if code != 0 {
			t.Errorf("%v --help: exit %d: %s", p, code, errOut)
		}
		for _, v := range []string{secret, "url-never-shown", "db-never-shown"} {
			if strings.Contains(out+errOut, v) {
				t.Errorf("%v --help prints %q:\n%s", p, v, out)
			}
		}
		if len(p) > 0 && p[0] == "send" && !strings.Contains(out, "(env MQLITE_KEY, set)") {
			t.Errorf("send --help does not say MQLITE_KEY is set:\n%s", out)
		}
	}
}

// TestUnreachableBrokerFailsFast: a broker nobody listens for fails the
// command by default within a few seconds, with a "retrying" line per
// retry, and --retry-for 0 fails at the first try.
func TestUnreachableBrokerFailsFast(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every connection is refused

	start := time.Now()
	_, errOut, code := runIn(t, "", false, "queues", "list", "--url", url, "--key", "k", "--db", "")
	took := time.Since(start)
	if code != 1 {
		t.Errorf("exit %d, want 1: %s", code, errOut)
	}
	if took > 5*time.Second {
		t.Errorf("failed after %v, want under 5s", took)
	}
	retries := strings.Count(errOut, "mqlite: retrying in ")
	if retries < 2 || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, "broker unavailable") {
		t.Errorf("%d retry lines; stderr:\n%s", retries, errOut)
	}
	_, errOut, code = runIn(t, "", false, "queues", "list", "--url", url, "--key", "k", "--db", "", "--retry-for", "0")
	if code != 1 || strings.Contains(errOut, "retrying") {
		t.Errorf("--retry-for 0: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestUpdateKeepsUnsetOptions: queues update changes the flags given and
// nothing else (it used to reset every other option to its default).
func TestUpdateKeepsUnsetOptions(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	out, errOut, code := runIn(t, "", false, append([]string{"queues", "update", "orders", "--lock", "2m", "--json"}, db...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var q struct {
		Options struct {
			MaxDeliveryCount int   `json:"max_delivery_count"`
			LockDurationMS   int64 `json:"lock_duration_ms"`
			DedupByBody      bool  `json:"dedup_by_body"`
			DLQ              struct {
				MaxCount int `json:"max_count"`
			} `json:"dlq"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	o := q.Options
	if o.LockDurationMS != 120_000 || o.MaxDeliveryCount != 5 || !o.DedupByBody || o.DLQ.MaxCount != 7 {
		t.Errorf("after update --lock 2m: %+v, want lock 2m and max delivery 5, dedup by body, dlq max count 7 kept", o)
	}

	// A schedule keeps what update does not name; --cron replaces --every.
	for _, args := range [][]string{
		{"schedules", "create", "tick", "--target", "orders", "--every", "1h", "--body", "tick", "--subject", "s"},
		{"schedules", "update", "tick", "--cron", "0 9 * * *"},
	} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, _, _ = runIn(t, "", false, append([]string{"schedules", "list"}, db...)...)
	if !strings.Contains(out, "orders") || !strings.Contains(out, "0 9 * * *") {
		t.Errorf("schedules list after update --cron: %s", out)
	}

	// A subscription keeps the parts of its filter update does not name.
	for _, args := range [][]string{
		{"topics", "create", "events"},
		{"subscriptions", "create", "events", "mail", "--subject-prefix", "order.", "--prop", "region=eu"},
		{"subscriptions", "update", "events", "mail", "--prop", "tier=gold"},
	} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, _, _ = runIn(t, "", false, append([]string{"topics", "list"}, db...)...)
	for _, want := range []string{"subject^=order.", "region in eu", "tier in gold"} {
		if !strings.Contains(out, want) {
			t.Errorf("topics list after subscriptions update lacks %q: %s", want, out)
		}
	}
}

// TestJSONErrors: with --json every failure is one JSON object on stdout
// with the broker's code and reason and the exit code, and nothing else.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	tests := []struct {
		name       string
		args       []string
		code       int
		wantCode   string
		wantReason string
	}{
		{"unknown flag", []string{"peek", "orders", "--bogus"}, 2, "invalid", "usage"},
		{"missing argument", []string{"peek"}, 2, "invalid", "usage"},
		{"unknown queue", []string{"peek", "nope"}, 1, "not_found", "queue_not_found"},
		{"an argument the store refuses", []string{"receive", "orders", "--max", "-1"}, 2, "invalid", "invalid_argument"},
		{"refused without --yes", []string{"queues", "delete", "orders"}, 2, "invalid", "usage"},
		{"redrive of a seq that is no dead letter", []string{"dlq", "redrive", "orders", "--seq", "99"}, 1, "not_found", "message_not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runIn(t, "", false, append(append(tc.args, "--json"), db...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if errOut != "" {
				t.Errorf("stderr %q, want nothing", errOut)
			}
			var v struct {
				Error struct {
					Code, Reason, Message string
					ExitCode              int `json:"exit_code"`
				}
			}
			dec := json.NewDecoder(strings.NewReader(out))
			if err := dec.Decode(&v); err != nil || dec.More() {
				t.Fatalf("stdout is not one JSON value (%v): %q", err, out)
			}
			e := v.Error
			if e.Code != tc.wantCode || e.Reason != tc.wantReason || e.ExitCode != tc.code || e.Message == "" {
				t.Errorf("error %+v, want code %s reason %s exit %d", e, tc.wantCode, tc.wantReason, tc.code)
			}
		})
	}
}

// TestJSONBodies: --json prints a JSON body as JSON and any other body in
// body_base64.
func TestJSONBodies(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	out, errOut, code := runIn(t, "", false, append([]string{"peek", "orders", "--json"}, db...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v struct {
		Messages []struct {
			Body       json.RawMessage `json:"body"`
			BodyBase64 []byte          `json:"body_base64"`
		}
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Messages) != 2 {
		t.Fatalf("%v: %s", err, out)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, v.Messages[0].Body); err != nil || body.String() != `{"id":1}` || v.Messages[0].BodyBase64 != nil {
		t.Errorf("a JSON body: %s", out)
	}
	if v.Messages[1].Body != nil || string(v.Messages[1].BodyBase64) != "\xff\xfe binary" {
		t.Errorf("a binary body: %s", out)
	}
}

// TestDestructiveCommandsAsk: without a terminal each destructive command
// refuses (exit 2) unless --yes, and changes nothing; on a terminal it asks,
// "n" changes nothing, and "y" goes on (--yes, for the queues' commands).
func TestDestructiveCommandsAsk(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		left string // what still exists when refused: a command and what it prints
	}{
		{[]string{"queues", "delete", "orders"}, "orders"},
		{[]string{"queues", "purge", "orders"}, "orders"},
		{[]string{"dlq", "purge", "orders"}, "orders"},
		{[]string{"topics", "delete", "events"}, "events"},
		{[]string{"keys", "revoke", "KEY"}, "KEY"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			t.Parallel()
			db := newStore(t)
			for _, c := range [][]string{{"topics", "create", "events"}, {"receive", "orders", "--reject", "bad"}} {
				if _, errOut, code := runIn(t, "", false, append(c, db...)...); code != 0 {
					t.Fatal(errOut)
				}
			}
			key, errOut, code := runIn(t, "", false, append([]string{"keys", "create", "--role", "admin", "--queue", "*"}, db...)...)
			if code != 0 {
				t.Fatal(errOut)
			}
			out, _, _ := runIn(t, "", false, append([]string{"keys", "list", "--json"}, db...)...)
			var ks struct{ Keys []struct{ ID string } }
			if err := json.Unmarshal([]byte(out), &ks); err != nil || len(ks.Keys) != 1 || strings.TrimSpace(key) == "" {
				t.Fatalf("keys: %v %s", err, out)
			}
			args := append([]string(nil), tc.args...)
			if args[2] == "KEY" {
				args[2] = ks.Keys[0].ID
			}
			// What the store looks like, to compare after each refusal.
			snapshot := func() string {
				var all string
				for _, c := range [][]string{{"stats"}, {"topics", "list"}, {"keys", "list"}} {
					out, errOut, code := runIn(t, "", false, append(c, db...)...)
					if code != 0 {
						t.Fatalf("%v: %s", c, errOut)
					}
					if c[0] == "stats" {
						out = out[:strings.LastIndex(out, " ")] // the OLDEST column moves with the clock
					}
					all += out
				}
				return all
			}
			before := snapshot()

			_, errOut, code = runIn(t, "", false, append(args, db...)...)
			if code != 2 || !strings.Contains(errOut, "refusing without --yes") {
				t.Errorf("no terminal, no --yes: exit %d, stderr %q", code, errOut)
			}
			_, errOut, code = runIn(t, "n\n", true, append(args, db...)...)
			if code != 1 || !strings.Contains(errOut, "[y/N]") || !strings.Contains(errOut, "aborted") {
				t.Errorf("answered n: exit %d, stderr %q", code, errOut)
			}
			if after := snapshot(); after != before {
				t.Errorf("a refused %v changed the store:\n%s\n---\n%s", args, before, after)
			}
			// "y" on a terminal goes on, as --yes does without one.
			stdin, terminal, last := "y\n", true, args
			if tc.args[0] == "queues" {
				stdin, terminal, last = "", false, append(args, "--yes")
			}
			if _, errOut, code = runIn(t, stdin, terminal, append(last, db...)...); code != 0 {
				t.Errorf("%v answered %q: exit %d: %s", last, stdin, code, errOut)
			}
			if after := snapshot(); after == before {
				t.Errorf("%v answered %q changed nothing", last, stdin)
			}
		})
	}
}

// TestSettledStateAndRedrive: receive --complete shows what it did, and a
// redrive of a seq that is no dead letter fails.
func TestSettledStateAndRedrive(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	out, _, code := runIn(t, "", false, append([]string{"receive", "orders", "--complete"}, db...)...)
	if code != 0 || !strings.Contains(out, "completed") || strings.Contains(out, "locked") {
		t.Errorf("receive --complete: exit %d:\n%s", code, out)
	}
	_, errOut, code := runIn(t, "", false, append([]string{"dlq", "redrive", "orders", "--seq", "42"}, db...)...)
	if code != 1 || !strings.Contains(errOut, "redrove 0 of the 1 seqs given") {
		t.Errorf("redrive of seq 42: exit %d: %s", code, errOut)
	}
}
