package mqlite_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The map of the rooms is the table at the top of docs/internals.md: one
// row per package of the repository, every module's, with what it holds and
// what it may import of the repository. The tests below hold the tree to it
// and to the rule that only the root reaches the engine.

const modulePath = "github.com/mqlite/mqlite"

// engines are the import paths of the engines: SQLite's and PostgreSQL's.
var engines = []string{modulePath + "/internal/engine", modulePath + "/internal/postgres"}

// machinery are the packages under internal/ that the root builds on and
// that must not reach back up: the seam, the engine, and the transaction
// machinery. None may import the root; none but the engine itself may
// import the engine.
var machinery = []string{
	"internal/driver",
	"internal/engine",
	"internal/groupcommit",
	"internal/handoff",
	"internal/postgres",
	"internal/receivers",
	"internal/tally",
	"internal/txmark",
}

// listedPackage is what the tests read of `go list -json`.
type listedPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// rel is p's row name in the map: its path below the repository's root,
// or "mqlite" for the root package.
func rel(p string) string {
	if p == modulePath {
		return "mqlite"
	}
	return strings.TrimPrefix(p, modulePath+"/")
}

// ofRepo reports whether import path p is a package of the repository.
func ofRepo(p string) bool { return p == modulePath || strings.HasPrefix(p, modulePath+"/") }

// listPackages lists every package of the repository's modules (the
// workspace, go.work, holds them all), by their map name.
func listPackages(t *testing.T) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", modulePath+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("%s: %s", rel(p.ImportPath), p.Error.Err)
		}
		pkgs[rel(p.ImportPath)] = p
	}
	if _, ok := pkgs["mqlite"]; !ok {
		t.Fatal("go list did not list the root package")
	}
	return pkgs
}

// mapRow is a row of the map: a package name is "mqlite" for the root,
// else its path below the root.
var mapRow = regexp.MustCompile("(?m)^\\| `([a-z0-9/_.-]+)` \\|[^|]+\\|([^|]+)\\|$")

// backticked is every `name` of a cell.
var backticked = regexp.MustCompile("`([a-z0-9/_.-]+)`")

// readMap reads the map of the rooms: each package's name and the names of
// the repository's packages it may import.
func readMap(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The map of the rooms\n")
	if !ok {
		t.Fatal(`docs/internals.md has no section "## The map of the rooms"`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	rooms := map[string][]string{}
	for _, m := range mapRow.FindAllStringSubmatch(section, -1) {
		if _, dup := rooms[m[1]]; dup {
			t.Errorf("the map lists %s twice", m[1])
		}
		may := []string{}
		for _, n := range backticked.FindAllStringSubmatch(m[2], -1) {
			may = append(may, n[1])
		}
		rooms[m[1]] = may
	}
	if len(rooms) == 0 {
		t.Fatal("docs/internals.md's map of the rooms has no rows")
	}
	return rooms
}

// TestRoomsMap holds docs/internals.md's map of the rooms to the tree:
// every package it lists exists, every package of the repository is
// listed, and every import of a package (not its tests') of the
// repository's own packages is one its row allows.
func TestRoomsMap(t *testing.T) {
	t.Parallel()
	rooms := readMap(t)
	pkgs := listPackages(t)
	for _, name := range slices.Sorted(maps.Keys(rooms)) {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("the map lists %s, which is not a package of the tree", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[name]
		may, ok := rooms[name]
		if !ok {
			t.Errorf("package %s is not in the map of the rooms (docs/internals.md)", name)
			continue
		}
		for _, imp := range p.Imports {
			if ofRepo(imp) && !slices.Contains(may, rel(imp)) {
				t.Errorf("package %s imports %s, which its row of the map does not allow (may import: %s)",
					name, rel(imp), strings.Join(may, ", "))
			}
		}
	}
}

// TestOnlyTheRootImportsTheEngine: no package but the root imports an
// engine (internal/engine, internal/postgres), tests included, except the
// engine's own tests. Every
// other package reaches the engine through the root, and speaks the
// engine-neutral types of internal/driver.
func TestOnlyTheRootImportsTheEngine(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[name]
		if p.ImportPath == modulePath || slices.Contains(engines, p.ImportPath) {
			continue
		}
		for _, in := range []struct {
			what    string
			imports []string
		}{{"its code", p.Imports}, {"its tests", p.TestImports}, {"its external tests", p.XTestImports}} {
			for _, e := range engines {
				if slices.Contains(in.imports, e) {
					t.Errorf("package %s imports %s in %s: only the root may", name, rel(e), in.what)
				}
			}
		}
	}
}

// TestMachineryImportsNoRoot: the seam, the engine and the transaction
// machinery under internal/ import no root package, directly or through
// another package of the repository, and none but the engine imports the
// engine: they speak database/sql and internal/driver's types, so the root
// can import them without a cycle. The failure names the path of imports.
func TestMachineryImportsNoRoot(t *testing.T) {
	t.Parallel()
	pkgs := listPackages(t)
	for _, name := range machinery {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("package %s does not exist: the map of the rooms promises it", name)
			continue
		}
		forbidden := []string{"mqlite"}
		for _, e := range engines {
			if rel(e) != name {
				forbidden = append(forbidden, rel(e))
			}
		}
		for _, f := range forbidden {
			if path := importChain(pkgs, name, f); path != nil {
				t.Errorf("package %s imports %s: %s", name, f, strings.Join(path, " imports "))
			}
		}
	}
}

// importChain is the shortest chain of imports (code, not tests) from
// package from to package to, both map names, or nil when there is none.
func importChain(pkgs map[string]listedPackage, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[at].Imports {
			if !ofRepo(imp) {
				continue
			}
			next := rel(imp)
			if _, seen := prev[next]; seen {
				continue
			}
			prev[next] = at
			if next == to {
				var chain []string
				for n := to; n != ""; n = prev[n] {
					chain = append([]string{n}, chain...)
				}
				return chain
			}
			queue = append(queue, next)
		}
	}
	return nil
}

// TestRootNamesTheEngineOnce: in the root package, engine.go alone (which
// registers the engines) names internal/engine and internal/postgres;
// every other file reaches the engine through the Store's driver.Driver.
func TestRootNamesTheEngineOnce(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "engine.go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); slices.Contains(engines, path) {
				t.Errorf("%s imports %s: call the engine through s.eng", name, path)
			}
		}
	}
}
