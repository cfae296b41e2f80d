// Command citecheck refuses comments in Go code, tests included, that cite
// a document the repository does not hold: the design notes, a numbered issue
// of the tracker, a numbered section of a design text. A comment gives its
// reason in the repository's own words or links a file under docs/, which a
// reader of the code (or of its godoc) can open. `make lint` runs it over
// the whole tree, every module included:
//
//	go run ./internal/citecheck .
//
// It prints one line per offending comment line and exits 1 when there is
// any, 2 when it cannot read the tree.
package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// citation matches a reference to a document outside the repository. The
// words stand alone so that, say, "seed counts" or "tissue 3" pass.
var citation = regexp.MustCompile(`(?i)§` +
	`|\bseeds?/` +
	`|\bthe seed\b` +
	`|\bseed,? section\b` +
	`|\b(DESIGN|STYLE|DEVELOPERS|MACHINES)\.md\b` +
	`|\bprompt\d*\.md\b` +
	`|\bissue #?\d+` +
	`|\bitem \d+\b`)

// Finding is one comment line that cites an outside document.
type Finding struct {
	Pos  token.Position
	Line string
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	os.Exit(run(os.Stdout, os.Stderr, root))
}

// run checks the tree at root, prints what it finds to out and any failure
// to read the tree to errOut, and returns the exit code.
func run(out, errOut io.Writer, root string) int {
	found, err := check(root)
	if err != nil {
		fmt.Fprintln(errOut, "citecheck:", err)
		return 2
	}
	for _, f := range found {
		fmt.Fprintf(out, "%s: comment cites a document outside the repository: %s\n", f.Pos, f.Line)
	}
	if len(found) > 0 {
		fmt.Fprintf(out, "citecheck: %d comment lines; say the reason in the repository's words or link docs/\n", len(found))
		return 1
	}
	return 0
}

// check walks the tree at root and returns every citing comment line of
// its Go files, tests included, skipping hidden folders, testdata, vendor and
// node_modules.
func check(root string) ([]Finding, error) {
	var found []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, group := range f.Comments {
			for _, c := range group.List {
				for i, line := range strings.Split(c.Text, "\n") {
					if citation.MatchString(line) {
						pos := fset.Position(c.Slash)
						pos.Line += i
						found = append(found, Finding{Pos: pos, Line: strings.TrimSpace(line)})
					}
				}
			}
		}
		return nil
	})
	return found, err
}
