package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBenchmarkFiguresAgree: docs/benchmark.md's "Current figures" of the
// send and the drain give the headline's figures (mqlite's msgs/s, the
// ratio and the goal), so the page does not contradict itself.
func TestBenchmarkFiguresAgree(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "benchmark.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	section := func(title string) string {
		_, s, ok := strings.Cut(doc, "\n"+title+"\n")
		if !ok {
			t.Fatalf("docs/benchmark.md has no %q", title)
		}
		if i := strings.Index(s, "\n#"); i >= 0 {
			s = s[:i]
		}
		return s
	}
	// cells returns the cells of the table row of section whose first
	// cell starts with label.
	cells := func(section, label string) []string {
		for _, line := range strings.Split(section, "\n") {
			c := strings.Split(strings.Trim(line, "|"), "|")
			if strings.HasPrefix(strings.TrimSpace(c[0]), label) {
				for i := range c {
					c[i] = strings.TrimSpace(c[i])
				}
				return c
			}
		}
		t.Fatalf("no row %q", label)
		return nil
	}
	headline, current := section("## Headline"), section("### Current figures")
	for _, pair := range [][2]string{
		{"[send one message per transaction]", "send 1 per tx, no MessageID"},
		{"… with a MessageID | 15", "send 1 per tx, MessageID"},
		{"send in batches of 100, no MessageID", "send 100 per tx, no MessageID"},
		{"… with a MessageID | 62", "send 100 per tx, MessageID"},
		{"drain one at a time", "drain 1 at a time"},
		{"drain in batches of 100", "drain 100 per tx"},
	} {
		h := cellsAfter(t, headline, pair[0])
		c := cells(current, pair[1])
		// Headline: question | mqlite | baseline | ratio | goal | met?;
		// current: measure | mqlite | ratio | goal | met?.
		if h[1] != c[1] || h[3] != c[2] || h[4] != c[3] {
			t.Errorf("%s: current figures %q, %q, goal %q; the headline says %q, %q, goal %q",
				pair[1], c[1], c[2], c[3], h[1], h[3], h[4])
		}
	}
}

// cellsAfter returns the cells of the first line of section that starts
// with "| " and contains prefix (a row of the headline, whose first cells
// repeat).
func cellsAfter(t *testing.T, section, prefix string) []string {
	t.Helper()
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| "+strings.SplitN(prefix, " | ", 2)[0]) && strings.Contains(line, prefix) {
			c := strings.Split(strings.Trim(line, "|"), "|")
			for i := range c {
				c[i] = strings.TrimSpace(c[i])
			}
			return c
		}
	}
	t.Fatalf("no headline row %q", prefix)
	return nil
}

// TestCIScriptNamesFilesThatExist: every repository path .ci/run names (a
// word ending in .go, .md or .sh) exists.
func TestCIScriptNamesFilesThatExist(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range regexp.MustCompile(`[\w./-]+\.(?:go|md|sh)\b`).FindAllString(string(data), -1) {
		if _, err := os.Stat(filepath.Join(repoRoot, w)); err != nil {
			t.Errorf(".ci/run names %s: %v", w, err)
		}
	}
}
