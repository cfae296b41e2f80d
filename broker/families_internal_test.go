package broker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// rootOutsideFamilies are the root package's files that belong to no
// family, as docs/internals.md's "Where things are" names them.
var rootOutsideFamilies = []string{"doc.go", "errors.go", "options.go", "engine.go"}

// TestFamilyFiles holds the "Where things are" table of docs/internals.md
// to the tree: each family file is where the table says, in each layer
// (the root package, "..", the last), and absent where it says no. Every
// non-test file of the root is a family's (<family>.go, or a part of a
// family too big for one file: <family>_<part>.go) or one of
// rootOutsideFamilies. routes.go declares the route table alone: a
// handler written there instead of in its family's file fails here.
func TestFamilyFiles(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	layers := []string{"../internal/wire", ".", "../client", "../cmd/mqlite", ".."}
	row := regexp.MustCompile("(?m)^\\| `(\\w+\\.go)` \\| [^|]+ \\| (yes|no) \\| (yes|no) \\| (yes|no) \\| (yes|no) \\| (yes|no) \\|$")
	rows := row.FindAllStringSubmatch(string(b), -1)
	if len(rows) == 0 {
		t.Fatal("docs/internals.md has no table of family files")
	}
	for _, m := range rows {
		for i, dir := range layers {
			_, err := os.Stat(filepath.Join(dir, m[1]))
			if want := m[2+i] == "yes"; (err == nil) != want {
				t.Errorf("%s/%s: the table says %s, the tree has it: %v", dir, m[1], m[2+i], err == nil)
			}
		}
	}
	rootFamilies := map[string]bool{}
	for _, m := range rows {
		if m[2+len(layers)-1] == "yes" {
			rootFamilies[strings.TrimSuffix(m[1], ".go")] = true
		}
	}
	for _, name := range rootOutsideFamilies {
		if !strings.Contains(string(b), "`"+name+"`") {
			t.Errorf("docs/internals.md does not name %s, a root file outside the families", name)
		}
	}
	files, err := filepath.Glob("../*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") || slices.Contains(rootOutsideFamilies, name) {
			continue
		}
		family, _, _ := strings.Cut(strings.TrimSuffix(name, ".go"), "_")
		if !rootFamilies[family] {
			t.Errorf("the root's %s is of no family of docs/internals.md's table (mqlite column), nor outside them (rootOutsideFamilies)", name)
		}
	}

	f, err := parser.ParseFile(token.NewFileSet(), "routes.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != "routes" {
				t.Errorf("routes.go declares %s: it belongs in its family's file", d.Name.Name)
			}
		case *ast.GenDecl:
			if d.Tok != token.IMPORT {
				t.Errorf("routes.go declares a %s: it belongs in its family's file", d.Tok)
			}
		}
	}
}
