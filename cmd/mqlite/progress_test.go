package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProgressOnlyOnATerminal: sending a file draws a progress bar on a
// terminal's stderr, and none when stderr is not a terminal or the output
// is JSON, where it would corrupt what a script reads.
func TestProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(file, []byte(strings.Repeat("a line\n", 300)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		terminal bool
		extra    []string
		bar      bool
	}{
		{"terminal", true, nil, true},
		{"pipe", false, nil, false},
		{"terminal, JSON", true, []string{"--json"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newStore(t)
			args := append(append([]string{"send", "orders", "--file", file}, tc.extra...), db...)
			out, errOut, code := runIn(t, "", tc.terminal, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := strings.Contains(errOut, "sending"); got != tc.bar {
				t.Errorf("progress bar drawn: %v, want %v; stderr %q", got, tc.bar, errOut)
			}
			if !strings.Contains(out, "300") {
				t.Errorf("stdout %q does not count the 300 lines sent", out)
			}
		})
	}
}
