// Package docs_test compiles the Go blocks of the pages of docs/ that are
// not pinned elsewhere (README's are, by example_readme_test.go; the shell
// blocks of docs/ are run by cmd/mqlite's TestDocs): the docs are code.
package docs_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goPages are the pages whose ```go blocks TestGoBlocks compiles.
var goPages = []string{"conformance.md", "jobs.md", "operations.md", "relay.md"}

// goBlock is one ```go block of a page.
type goBlock struct {
	page string // e.g. "jobs.md"
	line int    // of the block's first line of code, from 1
	code string
}

func (b goBlock) String() string { return fmt.Sprintf("docs/%s:%d", b.page, b.line) }

// goBlocks returns the ```go blocks of page.
func goBlocks(t *testing.T, page string) []goBlock {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goBlock
	var cur *goBlock
	var lines []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goBlock{page: page, line: n + 1}
			lines = nil
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = strings.Join(lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%v: the block is not closed", *cur)
	}
	return out
}

// imports are the packages a block may name without importing them, by
// the name the docs use.
var imports = map[string]string{
	"context":          "context",
	"errors":           "errors",
	"fmt":              "fmt",
	"io":               "io",
	"log":              "log",
	"http":             "net/http",
	"os":               "os",
	"sql":              "database/sql",
	"testing":          "testing",
	"time":             "time",
	"mqlite":           "github.com/mqlite/mqlite",
	"client":           "github.com/mqlite/mqlite/client",
	"conformance":      "github.com/mqlite/mqlite/conformance",
	"consumer":         "github.com/mqlite/mqlite/consumer",
	"jobs":             "github.com/mqlite/mqlite/jobs",
	"metrics":          "github.com/mqlite/mqlite/metrics",
	"mqlitetest":       "github.com/mqlite/mqlite/mqlitetest",
	"outbox":           "github.com/mqlite/mqlite/outbox",
	"relay":            "github.com/mqlite/mqlite/relay",
	"kafka":            "github.com/mqlite/mqlite/relay/kafka",
	"webhook":          "github.com/mqlite/mqlite/relay/webhook",
	"replicate":        "github.com/mqlite/mqlite/replicate",
	"prometheus":       "github.com/prometheus/client_golang/prometheus",
	"promhttp":         "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":             "go.opentelemetry.io/otel",
	"sdktrace":         "go.opentelemetry.io/otel/sdk/trace",
	"standardwebhooks": "github.com/standard-webhooks/standard-webhooks/libraries/go",
}

// prelude declares the names the blocks use without declaring them: what
// the surrounding prose says they are. A block that declares one at the
// top level of its page drops it from its own prelude.
var prelude = []struct{ name, decl string }{
	{"ctx", "var ctx context.Context"},
	{"err", "var err error // a fragment may go on from the one before"},
	{"st", "var st *mqlite.Store"},
	{"c", "var c *client.Client // the broker's client"},
	{"tx", "var tx *mqlite.Tx"},
	{"email", "var email string"},
	{"secret", "var secret string"},
	{"mailer", "var mailer interface{ Send(ctx context.Context, to, subject string) error }"},
	{"workers", "var workers *jobs.Workers"},
	{"signup", "func signup(tx *mqlite.Tx, email string) error { return nil }"},
	{"sink", "var sink relay.Sink"},
	{"handle", "var handle consumer.Handler"},
	{"exporter", "var exporter sdktrace.SpanExporter"},
	{"alreadyProcessed", "func alreadyProcessed(id string) bool { return false }"},
	{"process", "func process(body []byte) {}"},
	{"openMyStore", "func openMyStore(t *testing.T, cfg conformance.Config) conformance.Instance { return conformance.Instance{} }"},
}

// TestGoBlocks compiles every ```go block of goPages, each in a package of
// its own: a block of declarations as a file, a fragment of statements as
// the body of a function returning error, with the prelude's names in
// scope and the packages it names imported. A compile error is reported at
// the page's file and line (a //line directive).
func TestGoBlocks(t *testing.T) {
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		t.Skip("needs the workspace (go.work): the blocks name packages of replicate and relay/kafka, modules of their own")
	}
	dir, err := os.MkdirTemp(".", "_gocheck") // "_": no ./... pattern sees it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var pkgs []string
	write := func(decls []goBlock, frag *goBlock) {
		what := fmt.Sprint(decls)
		if frag != nil {
			what = frag.String()
		}
		src, err := compilable(decls, frag)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		pkg := filepath.Join(dir, fmt.Sprintf("b%02d", len(pkgs)))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "block.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	for _, page := range goPages {
		blocks := goBlocks(t, page)
		if len(blocks) == 0 {
			t.Errorf("docs/%s: no ```go block", page)
		}
		// The page's blocks of declarations are in scope in each of its
		// fragments (a kind declared once, used below).
		var decls, frags []goBlock
		for _, b := range blocks {
			if allDecls(b.code) {
				decls = append(decls, b)
			} else {
				frags = append(frags, b)
			}
		}
		if len(frags) == 0 && len(decls) > 0 {
			write(decls, nil)
		}
		for _, f := range frags {
			write(decls, &f)
		}
	}
	if len(pkgs) == 0 {
		return
	}
	cmd := exec.Command("go", append([]string{"build"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Go blocks of docs/ do not compile (%v); each error is at the page's file and line:\n%s", err, out)
	}
}

// compilable returns the source of a package that holds the blocks of
// declarations decls and the fragment frag (nil for none).
func compilable(decls []goBlock, frag *goBlock) (string, error) {
	fset := token.NewFileSet()
	var fileDecls, stmts string
	var own []*ast.ImportSpec
	for _, d := range decls {
		fileDecls += fmt.Sprintf("//line %s\n", d) + d.code
	}
	if frag != nil {
		// An import block at the top of a fragment goes to the file.
		code := frag.code
		if strings.HasPrefix(code, "import") {
			f, err := parser.ParseFile(fset, "", "package p\n"+code, parser.ImportsOnly)
			if err != nil {
				return "", err
			}
			end := fset.Position(f.Decls[len(f.Decls)-1].End()).Offset - len("package p\n")
			own = f.Imports
			code = strings.Repeat("\n", strings.Count(code[:end], "\n")) + code[end:]
		}
		stmts = fmt.Sprintf("//line %s\n", frag) + code
	}
	// Parse to learn which packages and prelude names the block uses and
	// which names it declares.
	wrapped := "package p\n" + fileDecls + "func _() error {\n" + stmts + "\nreturn nil\n}\n"
	f, err := parser.ParseFile(fset, "block.go", wrapped, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			used[id.Name] = true
		}
		return true
	})
	declared := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			declared[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						declared[n.Name] = true
					}
				case *ast.TypeSpec:
					declared[s.Name.Name] = true
				}
			}
		}
	}
	// The fragment's own top-level variables, used once so that a
	// fragment may declare what the prose goes on to use.
	var locals []string
	body := f.Decls[len(f.Decls)-1].(*ast.FuncDecl).Body
	for _, s := range body.List {
		switch s := s.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, e := range s.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" && !slices.Contains(locals, id.Name) {
						locals = append(locals, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok {
				for _, sp := range g.Specs {
					if v, ok := sp.(*ast.ValueSpec); ok {
						for _, n := range v.Names {
							if n.Name != "_" {
								locals = append(locals, n.Name)
							}
						}
					}
				}
			}
		}
	}

	var src strings.Builder
	src.WriteString("package p\n\nimport (\n")
	named := map[string]bool{}
	for _, im := range own {
		fmt.Fprintf(&src, "\t%s\n", importLine(im))
		named[importName(im)] = true
	}
	var pre []string
	for _, p := range prelude {
		if used[p.name] && !declared[p.name] {
			pre = append(pre, p.decl)
		}
	}
	preUsed := map[string]bool{}
	for _, d := range pre {
		for name := range imports {
			if strings.Contains(d, name+".") {
				preUsed[name] = true
			}
		}
	}
	names := make([]string, 0, len(imports))
	for name := range imports {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if (used[name] || preUsed[name]) && !named[name] && !declared[name] {
			fmt.Fprintf(&src, "\t%s %q\n", name, imports[name])
		}
	}
	src.WriteString(")\n\n")
	for _, d := range pre {
		src.WriteString(d + "\n")
	}
	// Keep an import the block names only in a comment, or only for a
	// prelude name the block declares itself, from failing the build.
	for _, name := range names {
		if (used[name] || preUsed[name]) && !named[name] && !declared[name] {
			src.WriteString(blankUse(name))
		}
	}
	src.WriteString("\n" + fileDecls)
	src.WriteString("\n//line block.go:1\nfunc _() error {\n")
	src.WriteString(stmts)
	src.WriteString("\n")
	for _, l := range locals {
		fmt.Fprintf(&src, "_ = %s\n", l)
	}
	src.WriteString("return nil\n}\n")
	return src.String(), nil
}

// allDecls reports whether code is only top-level declarations.
func allDecls(code string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+code, 0)
	return err == nil && len(f.Decls) > 0
}

// blankUse is a declaration that uses the package imported as name, so
// that importing it is never an error.
func blankUse(name string) string {
	if name == "otel" {
		return "var _ = otel.Version\n"
	}
	return fmt.Sprintf("var _ = %s.%s\n", name, anExport[name])
}

// anExport is one exported name of each package of imports.
var anExport = map[string]string{
	"context": "Background", "errors": "New", "fmt": "Sprint", "io": "EOF", "log": "Printf",
	"http": "StatusOK", "os": "Exit", "sql": "ErrNoRows", "testing": "Short", "time": "Now",
	"mqlite": "Open", "client": "New", "conformance": "Run", "consumer": "Loop", "jobs": "Insert", "metrics": "NewObserver",
	"mqlitetest": "NewStore", "outbox": "SendOne", "relay": "New", "kafka": "New", "webhook": "New",
	"replicate": "Start", "prometheus": "NewRegistry", "promhttp": "HandlerFor",
	"sdktrace": "NewTracerProvider", "standardwebhooks": "NewWebhook",
}

func importLine(im *ast.ImportSpec) string {
	if im.Name != nil {
		return im.Name.Name + " " + im.Path.Value
	}
	return im.Path.Value
}

func importName(im *ast.ImportSpec) string {
	if im.Name != nil {
		return im.Name.Name
	}
	p := strings.Trim(im.Path.Value, `"`)
	return p[strings.LastIndex(p, "/")+1:]
}
