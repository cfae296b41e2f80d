package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../.."

// block is one shell block of a document: its file, its first line (its
// name in parsedOnly) and its lines.
type block struct {
	file, first string
	lines       []string
}

func (b block) String() string { return b.file + ": " + b.first }

// parsedOnly are the shell blocks TestDocs does not run, by file and first
// line, with why. Every line of them is still checked: each mqlite
// command against the real command tree (the command and every flag
// exist, the arguments fit), each make target in the Makefile, each go
// command's package folder. Every other block runs.
var parsedOnly = map[string]string{
	`README.md: (repo=$PWD && cd "$(mktemp -d)" && go mod init example.com/app && go mod edit -replace github.com/mqlite/mqlite="$repo" &&`: "runs from a clone's root and resolves a new module's dependencies through the module proxy",
	"README.md: go install github.com/mqlite/mqlite/cmd/mqlite@latest":                                                                      "internal/release's TestInstallFromProxy runs it against the tree published to a module proxy on disk; the blocks that follow run the binary built from this checkout",
	"README.md: go run -C cmd/mqlite . demo          # the demo, built from the checkout; nothing installed":                                "internal/release's TestFromClone runs the demo line in a copy of the checkout; make test is the run this test is part of",
	"docs/benchmark.md: make bench   # everything below, send and drain three times over":                                                   "benchmarks take many minutes; they are measurements, not checks",
	"docs/benchmark.md: go test -run '^$' -bench 'BenchmarkLoopLatency' -benchtime 1000x ./consumer":                                        "a benchmark",
	"docs/benchmark.md: go test -run '^$' -bench 'BenchmarkLatency/single' -benchtime 1000x ./internal/engine/":                             "benchmarks, one of a minute",
	"docs/benchmark.md: go test -C powerloss -run '^$' -bench BenchmarkSyncMode -benchtime 3000x .   # run 3 times":                         "a benchmark",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkEightProducers -benchtime 10000x -count 3 ./outbox":                               "a benchmark",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkGroupLatency -benchtime 10000x -count 3 ./consumer":                               "a benchmark",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkClaimCost -benchtime 3000x ./internal/engine/":                                    "a benchmark",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkPages -benchtime 1x ./internal/engine/":                                           "benchmarks",
	"docs/benchmark.md: go test -C relay/nats -run '^$' -bench BenchmarkRelayJetStream -benchtime 20000x .  # its own module":               "a benchmark",
	"docs/benchmark.md: go test -C relay/nats -run '^$' -bench 'BenchmarkRelayJetStream' -benchtime 20000x .  # one node and R3, one run":   "benchmarks and the 20,000-message cluster run; make test runs TestClusterLeaderLoss and TestLostMachine smaller",
	"docs/benchmark.md: make bench-brokers                    # go run -C bench/brokers . -v":                                               "a benchmark against RabbitMQ and JetStream; make test runs the bench/brokers module's TestSmoke",
	`docs/benchmark.md: go run -C bench/brokers . -sides mqlite,rabbitmq -scenario "consume one" -window 1 -n 5000 -runs 3`:                 "benchmarks against RabbitMQ and a profile; make test runs the bench/brokers module's TestSmoke",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkAttemptLookup -benchtime 20000x ./internal/engine/":                               "a benchmark",
	"docs/benchmark.md: for i in 1 2 3; do go test -run '^$' -bench BenchmarkHotPath -benchtime 1x ./internal/engine/; done":                "benchmarks, three runs",
	"docs/benchmark.md: for i in 1 2 3; do go test -run '^$' -bench BenchmarkLayoutForms -benchtime 1x ./internal/engine/; done":            "benchmarks, three runs of every layout form",
	"docs/benchmark.md: go test -run '^$' -bench BenchmarkLayoutForms -benchtime 1x -timeout 30m ./internal/postgres":                       "benchmarks on the shared PostgreSQL server, every layout form",
	`docs/benchmark.md: go run -C bench/brokers . -v -n 3000 -runs 3 -scenario "produce to a second"`:                                       "a benchmark against RabbitMQ; make test runs the bench/brokers module's TestSmoke",
	"docs/benchmark.md: go test -run '^$' -bench 'BenchmarkBrokerMemory|BenchmarkStreamCommitStall' -benchtime 1x ./broker/":                "benchmarks that hold 1.5 GiB on purpose (the old bounds)",
	"docs/benchmark.md: make bench                   # its last line: go run -C bench .":                                                    "benchmarks; make test runs the bench module's TestSmoke",
	"docs/benchmark.md: go test -C bench -run '^$' -bench BenchmarkJobs -benchtime 5000x -count 3 .":                                        "a benchmark of 35 s beside River",
	"docs/benchmark.md: make bench-postgres   # the two tables below, about 8 minutes":                                                      "benchmarks on the shared PostgreSQL server; make test runs the bench/postgres command's TestSmoke",
	"docs/operations.md: mqlite serve --db app.db --addr 10.0.0.5:7420 --tls-cert cert.pem --tls-key key.pem            # the primary":      "serves on a host address of the reader's network, until stopped; cmd/mqlite's standby tests run the same on loopback",
	"docs/operations.md: go run ./internal/release check                          # the version every go.mod names, e.g. v0.1.0":            "installs from a proxy through the network; internal/release's TestInstallFromProxy publishes the tree and installs the command the same way",
	"docs/operations.md: mqlite migrate --db app.db                                    # a no-op when it is up to date":                     "copies into the reader's PostgreSQL database; TestCopyCommand runs this block against a new database on the test server",
	"docs/operations.md: make test    # everything, -race, integrity sweep at 10,000 messages":                                              "make test is the run this test is part of; make crash takes half an hour",
	"docs/relay.md: mqlite queues create orders-in --dedup-window 2h --db app.db    # longer than --ack-wait + --outage":                    "the intake runs until SIGTERM against the reader's JetStream; TestRelayFromNATS runs the same command against an embedded server",
	"docs/relay.md: mqlite queues create payments-in --dedup-window 2h --db app.db":                                                         "the intake runs until SIGTERM against the reader's RabbitMQ; TestRelayFromAMQP runs the same command against 127.0.0.1:5672",
	"docs/relay.md: mqlite queues create clicks-in --dedup-window 2h --db app.db":                                                           "the intake runs until SIGTERM against the reader's Kafka; TestRelayFromKafka runs the same command against kfake",
	"docs/relay.md: go test -C relay/nats -race -tags crash_injection -count=1 -v -run 'TestSourceCrash$' .":                                "the crash test at make crash's size; make test runs TestSourceCrash at 1,000 messages",
	"docs/relay.md: mqlite queues create events --max-delivery 10000 --db app.db":                                                           "the relays run until SIGTERM against a webhook, NATS and RabbitMQ of the reader's; TestRelayCommand* run the same commands",
}

// shellBlocks reads the ```sh, ```bash and ```shell blocks of a Markdown
// file.
func shellBlocks(t *testing.T, file string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && (line == "```sh" || line == "```bash" || line == "```shell"):
			cur = &block{file: file}
		case cur != nil && line == "```":
			if len(cur.lines) > 0 {
				cur.first = cur.lines[0]
				out = append(out, *cur)
			}
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	return out
}

// docFiles are README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	matches, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		rel, _ := filepath.Rel(repoRoot, m)
		files = append(files, rel)
	}
	return files
}

var subshell = regexp.MustCompile(`\$\(([^()]*)\)`)

// commands splits a block's lines into simple commands: comments dropped,
// $(...) taken out as commands of their own, and split at ;, &&, ||, | and
// &. Each command is a list of words, without leading VAR=value.
func commands(lines []string) [][]string {
	var out [][]string
	for _, line := range lines {
		for _, m := range subshell.FindAllStringSubmatch(line, -1) {
			out = append(out, commands([]string{m[1]})...)
		}
		line = subshell.ReplaceAllString(line, "SUBSHELL")
		var words []string
		flush := func() {
			for len(words) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(words[0]) {
				words = words[1:]
			}
			if len(words) > 0 {
				out = append(out, words)
			}
			words = nil
		}
		var word strings.Builder
		inWord := false
		var quote rune
		end := func() {
			if inWord {
				words = append(words, word.String())
			}
			word.Reset()
			inWord = false
		}
		for _, r := range line {
			switch {
			case quote != 0 && r == quote:
				quote = 0
			case quote != 0:
				word.WriteRune(r)
			case r == '\'' || r == '"':
				quote, inWord = r, true
			case r == '#' && !inWord:
				end()
				flush()
				goto next
			case r == ' ' || r == '\t':
				end()
			case r == ';' || r == '&' || r == '|':
				end()
				flush()
			default:
				word.WriteRune(r)
				inWord = true
			}
		}
		end()
		flush()
	next:
	}
	return out
}

// checkCommand checks one command of a document without running it.
func checkCommand(t *testing.T, words []string) {
	t.Helper()
	switch words[0] {
	case "mqlite":
		root := newRoot(&globals{stdout: io.Discard, stderr: io.Discard, terminal: isTerminal})
		root.InitDefaultVersionFlag()
		cmd, rest, err := root.Find(words[1:])
		if err != nil {
			t.Errorf("%v: %v", words, err)
			return
		}
		cmd.InitDefaultHelpFlag()
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%v: %v", words, err)
			return
		}
		if cmd.Args != nil {
			if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
				t.Errorf("%v: %v", words, err)
			}
		}
	case "make":
		mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range words[1:] {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(mk) {
				t.Errorf("%v: the Makefile has no target %s", words, target)
			}
		}
	case "go":
		dir := repoRoot
		for i := 1; i < len(words); i++ {
			w := words[i]
			switch {
			case w == "-C" && i+1 < len(words):
				dir = filepath.Join(repoRoot, words[i+1])
				i++
			case strings.HasPrefix(w, "./") || w == ".":
				if _, err := os.Stat(filepath.Join(dir, w)); err != nil {
					t.Errorf("%v: %v", words, err)
				}
			case strings.HasPrefix(w, "github.com/mqlite/mqlite/"):
				pkg, _, _ := strings.Cut(strings.TrimPrefix(w, "github.com/mqlite/mqlite/"), "@")
				if _, err := os.Stat(filepath.Join(repoRoot, pkg, "main.go")); err != nil {
					t.Errorf("%v: no command at %s: %v", words, pkg, err)
				}
			}
		}
	}
}

// TestDocs runs the shell blocks of README.md and docs/*.md against the
// binary built from this checkout, one bash per file in a fresh folder (a
// block may use what an earlier one of its file made), with a broker the
// README's walkthrough starts itself (on a free port in place of 7420);
// the blocks of parsedOnly are checked without running. Every block is
// parsed first: a command or a flag that does not exist fails here.
func TestDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the documents' commands")
	}
	bin := binary(t)
	seen := map[string]bool{}
	for _, file := range docFiles(t) {
		var script []string
		for _, b := range shellBlocks(t, file) {
			for _, c := range commands(b.lines) {
				checkCommand(t, c)
			}
			if _, ok := parsedOnly[b.String()]; ok {
				seen[b.String()] = true
				continue
			}
			script = append(script, b.lines...)
		}
		if len(script) == 0 {
			continue
		}
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			runScript(t, bin, file, script)
		})
	}
	for name := range parsedOnly {
		if !seen[name] {
			t.Errorf("parsedOnly names a block that is not there: %s", name)
		}
	}
}

// runScript runs the lines of one document's blocks in bash, stopping at
// the first failure, in a fresh folder holding the repository's examples/
// (for the sample events), with the binary first on PATH and a broker
// port of its own.
func runScript(t *testing.T, bin, file string, lines []string) {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(abs, "examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(lines, "\n")
	var port string
	if strings.Contains(text, "mqlite serve") {
		// The document starts its broker: give it a free port.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().String()
		_ = ln.Close()
	} else {
		// The document talks to a broker it assumes: start one.
		url, _ := serve(t, filepath.Join(t.TempDir(), "broker.db"))
		port = strings.TrimPrefix(url, "http://")
	}
	text = strings.ReplaceAll(text, "127.0.0.1:7420", port)
	// Go commands run in the checkout, the rest in the fresh folder.
	text = regexp.MustCompile(`(?m)^go (run|build|test) `).ReplaceAllString(text, "(cd "+abs+" && go $1 ")
	text = regexp.MustCompile(`(?m)^(\(cd [^&]+&& go .*?)(\s+#.*)?$`).ReplaceAllString(text, "$1)$2")
	script := "set -euo pipefail\ntrap 'status=$?; jobs=$(jobs -p); [ -z \"$jobs\" ] || kill $jobs; wait; exit $status' EXIT\n" + text + "\n"
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"),
		"MQLITE_DB=", "MQLITE_URL=", "MQLITE_KEY=")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		err = fmt.Errorf("still running after 5 minutes: %w", <-done)
	}
	if err != nil {
		t.Fatalf("%s: %v\nscript:\n%s\noutput:\n%s", file, err, numbered(script), out.String())
	}
	t.Logf("%s:\n%s", file, out.String())
}

// numbered prefixes each line of s with its number.
func numbered(s string) string {
	var b bytes.Buffer
	sc := bufio.NewScanner(strings.NewReader(s))
	for n := 1; sc.Scan(); n++ {
		fmt.Fprintf(&b, "%3d  %s\n", n, sc.Text())
	}
	return b.String()
}
