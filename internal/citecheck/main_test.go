package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCitation: the pattern takes the ways an outside document has been
// cited in this tree, and leaves the repository's own words alone.
func TestCitation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"// Engine is the store boundary of the design (seed §11): what", true},
		{"// longer held under it (seed §7, issue 8 item 4).", true},
		{"// message out beyond MaxDeliveryCount (DESIGN.md, seed §6).", true},
		{"// implementation let go of its data (issue 8, item 9).", true},
		{"// replay: about 30 minutes (the seed, section 7).", true},
		{"// family, as issue 14 lists them.", true},
		{"// see seeds/000_4ac9315aa09d61c9.txt", true},
		{"// as STYLE.md asks", true},
		{"// the baseline of Issue #13", true},
		{"// seed counts the messages of every queue once", false},
		{"// see docs/conformance.md, section Fencing", false},
		{"// a tissue 3 mm thick; an itemized list", false},
		{"// https://github.com/golang/go/issues/12345", false},
	} {
		if got := citation.MatchString(tc.line); got != tc.want {
			t.Errorf("%q: cites %v, want %v", tc.line, got, tc.want)
		}
	}
}

// TestRun: a citing comment in a library or a test file fails the check
// with its file and line; the same in testdata or in a string does not.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"p.go", "p_test.go"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write := func(name, src string) {
				t.Helper()
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cites := "package p\n\n// X is fine.\n//\n// It holds (seed §4).\nvar X = \"DESIGN.md\"\n"
			write("p/testdata/q.go", cites)
			write("p/clean.go", "package p\n\n// Y links docs/concepts.md.\nvar Y = \"issue 8\"\n")

			var out, errOut bytes.Buffer
			if code := run(&out, &errOut, dir); code != 0 {
				t.Fatalf("a clean tree: exit %d, %s%s", code, out.String(), errOut.String())
			}
			write("p/"+name, cites)
			out.Reset()
			if code := run(&out, &errOut, dir); code != 1 {
				t.Fatalf("a citing comment: exit %d, want 1", code)
			}
			if want := filepath.Join(dir, "p", name) + ":5:"; !strings.HasPrefix(out.String(), want) || strings.Count(out.String(), "\n") != 2 {
				t.Errorf("output:\n%s\nwant one finding at %s and the summary", out.String(), want)
			}
			write("p/broken.go", "package p\nfunc {")
			if code := run(&out, &errOut, dir); code != 2 {
				t.Errorf("an unreadable file: exit %d, want 2", code)
			}
		})
	}
}
