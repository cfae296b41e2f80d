package broker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestFamilyFiles holds the "Where things are" table of docs/internals.md
// to the tree: each family file is where the table says, in each layer,
// and absent where it says no. routes.go declares the route table alone:
// a handler written there instead of in its family's file fails here.
func TestFamilyFiles(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	layers := []string{"../internal/wire", ".", "../client", "../cmd/mqlite"}
	row := regexp.MustCompile("(?m)^\\| `(\\w+\\.go)` \\| [^|]+ \\| (yes|no) \\| (yes|no) \\| (yes|no) \\| (yes|no) \\|$")
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
