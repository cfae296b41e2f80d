package mqlite_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// maxLoopTxFiles is the most root files a LoopTx commit may walk through
// (docs/internals.md, "The path of a LoopTx commit").
const maxLoopTxFiles = 5

// TestLoopTxPath counts the root files a consumer.LoopTx commit on a
// *mqlite.Store walks through, and holds docs/internals.md's "The path of
// a LoopTx commit" to them. It runs TestLoopTxPathProbe in a go test of
// its own, built with coverage of the root package: the probe readies a
// store and one delivery, clears the coverage counters, makes one commit
// (the step's send, consumer.CompleteTx, the claim of the next message:
// what LoopTx's commit of a store runs, tracing off, no Receive asleep)
// and writes the counters. A root file with a statement counted is on the
// path.
func TestLoopTxPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with coverage")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	profile := func(commits string) map[string]int64 {
		prof := filepath.Join(dir, "commits"+commits+".txt")
		cmd := exec.Command(gobin, "test", "-count=1", "-run", "^TestLoopTxPathProbe$",
			"-covermode=atomic", "-coverpkg=github.com/mqlite/mqlite", "-coverprofile="+prof, ".")
		cmd.Env = append(os.Environ(), "MQLITE_LOOPTX_PROBE="+commits)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the probe: %v\n%s", err, out)
		}
		return blockCounts(t, prof)
	}
	base, one := profile("0"), profile("1")
	seen := map[string]bool{}
	for block, n := range one {
		if n > base[block] {
			seen[strings.SplitN(block, ":", 2)[0]] = true
		}
	}
	var walked []string
	for name := range seen {
		walked = append(walked, name)
	}
	slices.Sort(walked)
	if len(walked) == 0 {
		t.Fatal("the probe counted no statement of the root")
	}
	if len(walked) > maxLoopTxFiles {
		t.Errorf("a LoopTx commit walks through %d root files, at most %d: %v", len(walked), maxLoopTxFiles, walked)
	}
	if doc := documentedPath(t); !slices.Equal(doc, walked) {
		t.Errorf("docs/internals.md lists the path as %v, the commit walks through %v", doc, walked)
	}
}

// blockCounts returns the counts of the root's blocks in the coverage
// profile at path, by "file.go:block".
func blockCounts(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := regexp.MustCompile(`^github\.com/mqlite/mqlite/(\w+\.go:\S+) \d+ (\d+)$`)
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			out[m[1]] += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// documentedPath returns, sorted, the root files of the table in
// docs/internals.md's "The path of a LoopTx commit".
func documentedPath(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### The path of a LoopTx commit\n")
	if !ok {
		t.Fatal(`docs/internals.md has no "### The path of a LoopTx commit"`)
	}
	sec, _, _ = strings.Cut(sec, "\n#")
	row := regexp.MustCompile("(?m)^\\| \\d+ \\| `(\\w+\\.go)` \\|")
	var out []string
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestLoopTxPathProbe is TestLoopTxPath's probe: it runs only in the go
// tests TestLoopTxPath starts, which say how many commits to make after
// the first (MQLITE_LOOPTX_PROBE: 0 or 1).
func TestLoopTxPathProbe(t *testing.T) {
	commits := os.Getenv("MQLITE_LOOPTX_PROBE")
	if commits == "" {
		t.Skip("run by TestLoopTxPath")
	}
	ctx := context.Background()
	off := mqlite.Config{ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1}
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), off)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"in", "out"} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		for range 3 {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "in", outbox.Message{Body: []byte("x")}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	msgs, err := st.Receive(ctx, "in", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	// commit is what consumer.LoopTx's commit of a store runs (consumer's
	// storeCommit): the step (here a send), CompleteTx, and the claim of
	// the next message in the same transaction (TxAndReceive).
	commit := func(m mqlite.Message) mqlite.Message {
		next, err := st.TxAndReceive(ctx, "in", mqlite.ReceiveOptions{Max: 1}, func(tx *mqlite.Tx) error {
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "out", outbox.Message{Body: []byte("y")}); err != nil {
				return err
			}
			return consumer.CompleteTx(tx.Context(), tx.SQL(), m.Lock())
		})
		if err != nil || len(next) != 1 {
			t.Fatal(next, err)
		}
		return next[0]
	}
	m := commit(msgs[0]) // warm: the queue cache, the statement cache
	if commits == "1" {
		commit(m)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
