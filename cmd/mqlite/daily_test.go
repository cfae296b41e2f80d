package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/internal/testdb"
)

// TestExplicitStoreWinsOverTheEnvironment: an exported MQLITE_URL does not
// refuse an explicit --db, nor MQLITE_DB an explicit --url; t.Setenv rules
// out t.Parallel.
func TestExplicitStoreWinsOverTheEnvironment(t *testing.T) {
	db := newStore(t)
	t.Setenv("MQLITE_URL", "http://127.0.0.1:1")
	t.Setenv("MQLITE_DB", db[1])
	out, errOut, code := runIn(t, "", false, "stats", "orders", "--db", db[1])
	if code != 0 || !strings.Contains(out, "orders  2") {
		t.Fatalf("--db with MQLITE_URL set: exit %d: %s %s", code, out, errOut)
	}
	// --url wins over MQLITE_DB: the command goes to the (unreachable)
	// broker, and says so, instead of refusing the pair.
	_, errOut, code = runIn(t, "", false, "stats", "orders", "--url", "http://127.0.0.1:1", "--key", "k", "--retry-for", "0")
	if code != 1 || strings.Contains(errOut, "not both") || !strings.Contains(errOut, "unavailable") {
		t.Fatalf("--url with MQLITE_DB set: exit %d: %s", code, errOut)
	}
	// Both on the command line are still refused.
	_, errOut, code = runIn(t, "", false, "stats", "orders", "--url", "http://127.0.0.1:1", "--db", db[1])
	if code != 2 || !strings.Contains(errOut, "not both") {
		t.Fatalf("--db and --url: exit %d: %s", code, errOut)
	}
}

// TestNegativeDurationsAreRefused: every duration flag refuses a negative
// value as a usage error, and nothing is sent.
func TestNegativeDurationsAreRefused(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	for _, args := range [][]string{
		{"send", "orders", "late", "--delay", "-5s"},
		{"send", "orders", "late", "--ttl", "-1m"},
		{"receive", "orders", "--wait", "-1s"},
		{"queues", "update", "orders", "--lock", "-30s"},
		{"queues", "list", "--retry-for", "-1s"},
		{"relay", "--queue", "orders", "--sink", "nats", "--drain", "-1s"},
	} {
		out, errOut, code := runIn(t, "", false, append(args, db...)...)
		if code != 2 || !strings.Contains(errOut, "cannot be negative") {
			t.Errorf("%v: exit %d, want 2 and the duration named: %s %s", args, code, out, errOut)
		}
	}
	out, _, _ := runIn(t, "", false, append([]string{"stats", "orders", "--json"}, db...)...)
	if !strings.Contains(out, `"active": 2`) {
		t.Errorf("a refused send changed the queue: %s", out)
	}
	// The one documented negative: --dedup-window -1ns turns it off.
	if _, errOut, code := runIn(t, "", false, append([]string{"queues", "update", "orders", "--dedup-window", "-1ns"}, db...)...); code != 0 {
		t.Errorf("--dedup-window -1ns: exit %d: %s", code, errOut)
	}
}

// TestReceiveSaysThePauseAndFindTheDeadLetters: receive on a paused queue
// says it is paused, not just "no messages"; find says it skips the dead
// letters and how to search them.
func TestReceiveSaysThePauseAndFindTheDeadLetters(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	for _, args := range [][]string{
		{"send", "orders", "gone", "--message-id", "order-9"},
		{"receive", "orders", "--max", "3", "--reject", "bad"},
		{"queues", "pause", "orders"},
	} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, _, code := runIn(t, "", false, append([]string{"send", "orders", "held back"}, db...)...)
	if code != 0 {
		t.Fatal(out)
	}
	out, errOut, code := runIn(t, "", false, append([]string{"receive", "orders"}, db...)...)
	if code != 0 || !strings.Contains(out, "queue orders is paused") || !strings.Contains(out, "mqlite queues resume orders") {
		t.Errorf("receive on a paused queue: exit %d: %s %s", code, out, errOut)
	}
	out, errOut, code = runIn(t, "", false, append([]string{"find", "orders", "--message-id", "order-9"}, db...)...)
	if code != 0 || !strings.Contains(out, "no messages") || !strings.Contains(out, "dead letters are not searched; add --state dead_lettered") {
		t.Errorf("find of a dead letter: exit %d: %s %s", code, out, errOut)
	}
	out, _, code = runIn(t, "", false, append([]string{"find", "orders", "--message-id", "order-9", "--state", "dead_lettered"}, db...)...)
	if code != 0 || !strings.Contains(out, "gone") || strings.Contains(out, "not searched") {
		t.Errorf("find --state dead_lettered: exit %d: %s", code, out)
	}
}

// TestSendDashReadsStdin: "send QUEUE -" sends standard input, whole, as
// the body, as Unix tools read "-".
func TestSendDashReadsStdin(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	body := "line one\nline two\n" // whole, newlines kept
	if _, errOut, code := runIn(t, body, false, append([]string{"send", "orders", "-"}, db...)...); code != 0 {
		t.Fatalf("send -: exit %d: %s", code, errOut)
	}
	out, _, _ := runIn(t, "", false, append([]string{"peek", "orders", "--json"}, db...)...)
	var got jsonMessages
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Messages) != 3 {
		t.Fatalf("peek: %v: %s", err, out)
	}
	if last := got.Messages[2]; string(last.BodyBase64) != body {
		t.Fatalf("body %q, want stdin %q", last.BodyBase64, body)
	}
}

// TestPurgeBySeq: queues purge and dlq purge take --seq (repeated or a
// comma list) and remove only those; a seq that is not there fails.
func TestPurgeBySeq(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	for _, args := range [][]string{
		{"send", "orders", "three"},
		{"send", "orders", "four"},
		{"receive", "orders", "--max", "2", "--reject", "bad"}, // seqs 1 and 2 dead-lettered
	} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, errOut, code := runIn(t, "", false, append([]string{"dlq", "purge", "orders", "--seq", "2", "--yes"}, db...)...)
	if code != 0 || !strings.Contains(out, "purged 1 dead letters") {
		t.Fatalf("dlq purge --seq 2: exit %d: %s %s", code, out, errOut)
	}
	out, errOut, code = runIn(t, "", false, append([]string{"queues", "purge", "orders", "--seq", "3,1", "--yes"}, db...)...)
	if code != 0 || !strings.Contains(out, "purged 2 messages") {
		t.Fatalf("queues purge --seq 3,1: exit %d: %s %s", code, out, errOut)
	}
	out, _, _ = runIn(t, "", false, append([]string{"stats", "orders", "--json"}, db...)...)
	if !strings.Contains(out, `"active": 1`) || !strings.Contains(out, `"dead_lettered": 0`) {
		t.Fatalf("after the purges: %s", out)
	}
	_, errOut, code = runIn(t, "", false, append([]string{"dlq", "purge", "orders", "--seq", "4", "--yes"}, db...)...)
	if code != 1 || !strings.Contains(errOut, "purged 0 of the 1 seqs given") {
		t.Fatalf("dlq purge of a live seq: exit %d: %s", code, errOut)
	}
}

// serveIn runs "mqlite serve" on db in this process with extra flags and
// returns its URL; the test's cleanup stops it.
func serveIn(t *testing.T, db string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errBuf testdb.Buffer
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--url", ""}, extra...), strings.NewReader(""), pw, &errBuf)
		_ = pw.CloseWithError(io.EOF)
		done <- code
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("serve printed nothing: %s", errBuf.String())
	}
	first := lines.Text()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve: exit %d: %s", code, errBuf.String())
		}
	})
	return first[strings.LastIndex(first, " ")+1:]
}

// TestServeMaxMessageBytes: a 5 MB body is refused by a broker with the
// default limit, naming it, and taken by one serving --max-message-bytes
// 6000000 (its request body limit grown to carry it).
func TestServeMaxMessageBytes(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 5_000_000)
	for _, tc := range []struct {
		name  string
		extra []string
		ok    bool
	}{
		{"the default limit", nil, false},
		{"--max-message-bytes 6000000", []string{"--max-message-bytes", "6000000"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "big.db")
			out, errOut, code := runIn(t, "", false, "keys", "create", "--role", "admin", "--queue", "*", "--db", db, "--url", "")
			if code != 0 {
				t.Fatalf("keys create: %s", errOut)
			}
			url := serveIn(t, db, tc.extra...)
			remote := []string{"--url", url, "--key", strings.TrimSpace(out), "--db", ""}
			if _, errOut, code := runIn(t, "", false, append([]string{"queues", "create", "big"}, remote...)...); code != 0 {
				t.Fatalf("queues create: %s", errOut)
			}
			out, errOut, code = runIn(t, big, false, append([]string{"send", "big", "-"}, remote...)...)
			switch {
			case tc.ok && code != 0:
				t.Fatalf("send of 5 MB: exit %d: %s", code, errOut)
			case !tc.ok && (code == 0 || !strings.Contains(errOut, "1048576")):
				t.Fatalf("send of 5 MB: exit %d, want a refusal naming the limit: %s %s", code, out, errOut)
			}
		})
	}
}

// TestServeRefusesBadLimits: --max-body given below what
// --max-message-bytes needs is a usage error, as is a limit out of range
// (the broker's shares and budgets included: the flags reach its Config),
// found before the address is taken: the test holds the port it names, so
// a limit checked after the listen would fail with the port's error (exit
// 1) instead.
func TestServeRefusesBadLimits(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, extra := range [][]string{
		{"--max-message-bytes", "6000000", "--max-body", "1000000"},
		{"--max-message-bytes", "0"},
		{"--max-message-bytes", "20000000"},
		{"--max-long-polls-per-key", "-5"},
		{"--max-answers", "-7"},
	} {
		code, served, _, errOut := serveUntilServing(t, append(extra, "--addr", held.Addr().String())...)
		if code != 2 || served {
			t.Errorf("%v: exit %d, served %v: %s", extra, code, served, errOut)
		}
	}
}

// TestSendPriority: send --priority gives a message its priority, which
// receive honours (the highest first) and peek and find show, as a column
// and in --json; a priority out of range is refused and nothing is sent.
func TestSendPriority(t *testing.T) {
	t.Parallel()
	db := newStore(t) // seqs 1 and 2, priority 0
	if _, errOut, code := runIn(t, "", false, append([]string{"send", "orders", "urgent", "--priority", "7"}, db...)...); code != 0 {
		t.Fatalf("send --priority 7: exit %d: %s", code, errOut)
	}
	for _, bad := range []string{"10", "-1"} {
		if _, _, code := runIn(t, "", false, append([]string{"send", "orders", "bad", "--priority", bad}, db...)...); code == 0 {
			t.Errorf("send --priority %s: exit 0, want a refusal", bad)
		}
	}
	out, _, _ := runIn(t, "", false, append([]string{"peek", "orders"}, db...)...)
	if !strings.Contains(out, "PRIORITY") || !regexp.MustCompile(`(?m)^3\s+active\s+7\s`).MatchString(out) {
		t.Errorf("peek does not show seq 3's priority 7:\n%s", out)
	}
	out, _, _ = runIn(t, "", false, append([]string{"find", "orders", "--json"}, db...)...)
	var got jsonMessages
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Messages) != 3 {
		t.Fatalf("find --json: %v: %s", err, out)
	}
	if got.Messages[2].Priority != 7 || got.Messages[0].Priority != 0 {
		t.Errorf("find --json priorities %d and %d, want 0 and 7", got.Messages[0].Priority, got.Messages[2].Priority)
	}
	out, _, _ = runIn(t, "", false, append([]string{"receive", "orders", "--json"}, db...)...)
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Messages) != 1 || got.Messages[0].Seq != 3 {
		t.Fatalf("receive: %v, want seq 3 (priority 7) first: %s", err, out)
	}
}
