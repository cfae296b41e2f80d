package main

import (
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPackageDocListsEveryCommand: the package doc's "The commands are"
// sentence names every command of the command tree, with the subcommands
// of each group in parentheses, and nothing else.
func TestPackageDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(f.Doc.Text()), " ")
	m := regexp.MustCompile(`The commands are (.*?)\. Run`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("no \"The commands are ... . Run\" sentence in the package doc:\n%s", doc)
	}
	// Each item is "name" or "name (sub, sub, sub)"; items are separated
	// by commas outside parentheses, the last by "and".
	var documented []string
	item := regexp.MustCompile(`^([a-z-]+)(?: \(([a-z, -]+)\))?$`)
	for _, part := range regexp.MustCompile(`,\s*(?:and\s+)?|\s+and\s+`).Split(protectParens(m[1]), -1) {
		part = strings.ReplaceAll(part, "\x00", ",")
		im := item.FindStringSubmatch(strings.TrimSpace(part))
		if im == nil {
			t.Fatalf("cannot read %q in the package doc's command list", part)
		}
		documented = append(documented, im[1])
		for _, sub := range strings.Split(im[2], ",") {
			if sub = strings.TrimSpace(sub); sub != "" {
				documented = append(documented, im[1]+" "+sub)
			}
		}
	}
	var actual []string
	for _, c := range newRoot(&globals{stdout: io.Discard, stderr: io.Discard}).Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		actual = append(actual, c.Name())
		for _, sub := range c.Commands() {
			if sub.Name() != "help" {
				actual = append(actual, c.Name()+" "+sub.Name())
			}
		}
	}
	slices.Sort(documented)
	slices.Sort(actual)
	for _, c := range actual {
		if !slices.Contains(documented, c) {
			t.Errorf("the package doc does not list %q", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(actual, c) {
			t.Errorf("the package doc lists %q, which is no command", c)
		}
	}
}

// protectParens replaces the commas inside parentheses with NUL, so that
// splitting on commas keeps a group's subcommands together.
func protectParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth > 0:
			r = '\x00'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestErrorsSayItOnceAndSuggest: a queue that is not there is said once,
// with the nearest queue; an unknown flag names the nearest flag.
func TestErrorsSayItOnceAndSuggest(t *testing.T) {
	t.Parallel()
	db := []string{"--db", filepath.Join(t.TempDir(), "app.db")}
	if _, errOut, code := runIn(t, "", false, append([]string{"queues", "create", "billing"}, db...)...); code != 0 {
		t.Fatalf("queues create: exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"send", "biling", "x"}, `mqlite: queue not found: "biling" (did you mean "billing"?)` + "\n", exitFailed},
		{[]string{"stats", "biling"}, `mqlite: queue not found: "biling" (did you mean "billing"?)` + "\n", exitFailed},
		{[]string{"send", "zzz", "x"}, `mqlite: queue not found: "zzz"` + "\n", exitFailed},
		{[]string{"receive", "billing", "--compelte"}, "mqlite: unknown flag: --compelte (did you mean \"--complete\"?)\nRun 'mqlite receive --help' for usage.\n", exitUsage},
		{[]string{"send", "billing", "x", "--jsn"}, "mqlite: unknown flag: --jsn (did you mean \"--json\"?)\nRun 'mqlite send --help' for usage.\n", exitUsage},
		{[]string{"send", "billing", "x", "--zzzzzz"}, "mqlite: unknown flag: --zzzzzz\nRun 'mqlite send --help' for usage.\n", exitUsage},
	} {
		_, errOut, code := runIn(t, "", false, append(tc.args, db...)...)
		if errOut != tc.want || code != tc.code {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d, stderr:\n%s", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// TestServeWarnsWithoutKeys: serve on a store with no valid key says, on
// stderr, that every request will be refused and how to create a key; with
// a key it says nothing of the kind.
func TestServeWarnsWithoutKeys(t *testing.T) {
	t.Parallel()
	const warning = "has no access key"
	_, served, _, stderr := serveUntilServing(t)
	if !served || !strings.Contains(stderr, warning) || !strings.Contains(stderr, "mqlite keys create --role admin") {
		t.Errorf("no keys: served %v, stderr:\n%s\nwant a warning with how to create a key", served, stderr)
	}
	db := filepath.Join(t.TempDir(), "keyed.db")
	if _, errOut, code := runIn(t, "", false, "keys", "create", "--role", "admin", "--queue", "*", "--db", db); code != 0 {
		t.Fatalf("keys create: exit %d: %s", code, errOut)
	}
	_, served, _, stderr = serveUntilServing(t, "--db", db)
	if !served || strings.Contains(stderr, warning) {
		t.Errorf("with a key: served %v, stderr:\n%s\nwant no warning", served, stderr)
	}
}

// TestAbandonOnTheLastDeliverySaysDeadLettered: receive --abandon of a
// message on its last allowed delivery says it was dead-lettered, as the
// message then is.
func TestAbandonOnTheLastDeliverySaysDeadLettered(t *testing.T) {
	t.Parallel()
	db := []string{"--db", filepath.Join(t.TempDir(), "app.db")}
	for _, args := range [][]string{{"queues", "create", "jobs", "--max-delivery", "2"}, {"send", "jobs", "x"}} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for i, want := range []string{"abandoned 1\n", "dead-lettered 1 (abandoned on the last allowed delivery)\n"} {
		out, errOut, code := runIn(t, "", false, append([]string{"receive", "jobs", "--abandon"}, db...)...)
		if code != 0 || !strings.HasSuffix(out, want) {
			t.Errorf("delivery %d: exit %d, stdout:\n%s\nstderr: %s\nwant it to end with %q", i+1, code, out, errOut, want)
		}
		if i == 1 && !strings.Contains(out, "dead_lettered") {
			t.Errorf("delivery 2: the message's state is not dead_lettered:\n%s", out)
		}
	}
	out, _, _ := runIn(t, "", false, append([]string{"stats", "jobs", "--json"}, db...)...)
	if !strings.Contains(out, `"dead_lettered": 1`) {
		t.Errorf("stats after: %s, want 1 dead-lettered", out)
	}
	out, _, code := runIn(t, "", false, append([]string{"receive", "jobs", "--abandon", "--json"}, db...)...)
	if code != 0 || strings.Contains(out, "abandoned") {
		t.Errorf("a third receive: exit %d: %s, want nothing", code, out)
	}
}

// TestPeekShowsAttemptHistory: after two abandons the table of peek and of
// dlq list counts the failed deliveries and names who held the last one;
// --json carries the whole history.
func TestPeekShowsAttemptHistory(t *testing.T) {
	t.Parallel()
	db := []string{"--db", filepath.Join(t.TempDir(), "app.db")}
	for _, args := range [][]string{{"queues", "create", "jobs", "--max-delivery", "2"}, {"send", "jobs", "x"},
		{"receive", "jobs", "--abandon"}} {
		if _, errOut, code := runIn(t, "", false, append(args, db...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, errOut, code := runIn(t, "", false, append([]string{"peek", "jobs"}, db...)...)
	if code != 0 || !strings.Contains(out, "FAILURES") || !strings.Contains(out, "1, last by ") {
		t.Fatalf("peek: exit %d, stdout:\n%s\nstderr: %s\nwant 1 failure and its worker", code, out, errOut)
	}
	if _, errOut, code := runIn(t, "", false, append([]string{"receive", "jobs", "--abandon"}, db...)...); code != 0 {
		t.Fatalf("receive: exit %d: %s", code, errOut)
	}
	out, _, code = runIn(t, "", false, append([]string{"dlq", "list", "jobs"}, db...)...)
	if code != 0 || !strings.Contains(out, "FAILURES") || !strings.Contains(out, "2, last by ") {
		t.Fatalf("dlq list: exit %d, stdout:\n%s\nwant 2 failures", code, out)
	}
	out, _, code = runIn(t, "", false, append([]string{"dlq", "list", "jobs", "--json"}, db...)...)
	if code != 0 || strings.Count(out, `"worker"`) != 2 || !strings.Contains(out, `"attempts"`) {
		t.Fatalf("dlq list --json: exit %d:\n%s\nwant both attempts with their workers", code, out)
	}
}
