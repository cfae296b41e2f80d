package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestInstallFromProxy publishes the tree to a module proxy on disk at the
// version the go.mods name and, with an empty module cache and outside
// the checkout, does what a user does: the README's install line builds a
// binary whose --version prints that version; a new application gets the
// root, outbox and consumer at it and builds the README's example; the
// NATS sink resolves to the same root version. Its control publishes
// cmd/mqlite again with a replace to the checkout in its go.mod: the
// install is refused.
//
// The third-party modules come from the local module cache's download
// folder (a proxy in the same format) and then the machine's proxy; the
// build cache is shared, and -trimpath keeps its keys free of the
// temporary folders, so a second run builds nothing again.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/mqlite from a module proxy on disk; make test runs it")
	}
	t.Parallel()
	version := repoVersion(t)
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := publish(t.Context(), repoRoot, mods, version, proxy); err != nil {
		t.Fatal(err)
	}
	u := newUser(t, proxy)

	// The README's install line, as written, then its first command.
	install := readmeLine(t, "go install github.com/mqlite/mqlite/cmd/mqlite@")
	u.run(t, u.dir(t), "sh", "-c", install)
	out := u.run(t, u.dir(t), filepath.Join(u.gopath, "bin", "mqlite"), "--version")
	if !strings.HasPrefix(out, "mqlite "+version+",") {
		t.Fatalf("mqlite --version printed %q, want mqlite %s, ...", out, version)
	}

	// A new application: the root, outbox and consumer at the version,
	// and the README's example built.
	app := u.dir(t)
	u.run(t, app, "go", "mod", "init", "example.com/app")
	u.run(t, app, "go", "get", rootPath+"@"+version, rootPath+"/outbox@"+version, rootPath+"/consumer@"+version)
	writeFile(t, filepath.Join(app, "main.go"), readmeProgram(t))
	u.run(t, app, "go", "build", "-o", filepath.Join(app, "app"), ".")

	// A satellite resolves to the same root version.
	u.run(t, app, "go", "get", rootPath+"/relay/nats@"+version)
	u.run(t, app, "go", "build", rootPath+"/relay/nats")
	if got := u.run(t, app, "go", "list", "-m", "-f", "{{.Version}}", rootPath); got != version {
		t.Fatalf("with relay/nats the root resolves to %s, want %s", got, version)
	}

	// The control: the same install, of a cmd/mqlite whose go.mod
	// regained a replace to the checkout, is refused.
	const control = "v0.0.1-control"
	copyRoot := t.TempDir()
	files, err := gitFiles(t.Context(), repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		return !strings.HasPrefix(f, "cmd/mqlite/") && f != "go.work" && f != "go.mod"
	})
	for _, f := range files {
		copyFile(t, filepath.Join(repoRoot, f), filepath.Join(copyRoot, f))
	}
	appendFile(t, filepath.Join(copyRoot, "cmd/mqlite/go.mod"), "\nreplace github.com/mqlite/mqlite => ../..\n")
	copyMods, err := findModules(copyRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTree(copyRoot, copyMods, version); err == nil || !strings.Contains(err.Error(), "cmd/mqlite/go.mod:") {
		t.Fatalf("checkTree of the copy: %v, want the replace in cmd/mqlite/go.mod reported", err)
	}
	cmdMod := copyMods[slices.IndexFunc(copyMods, func(m goModule) bool { return m.Dir == "cmd/mqlite" })]
	if err := publishModule(copyRoot, cmdMod, control, proxy, files); err != nil {
		t.Fatal(err)
	}
	refused, err := u.cmd(t, u.dir(t), "go", "install", rootPath+"/cmd/mqlite@"+control).CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "replace directives") {
		t.Fatalf("install with a replace in cmd/mqlite/go.mod: %v\n%s\nwant it refused for its replace directives", err, refused)
	}
}

// user is a Go user with nothing of mqlite yet: a GOPATH, and so a module
// cache, of its own, no workspace, and the proxy on disk ahead of the
// machine's for the modules of the repository (proxyEnv).
type user struct {
	gopath string
	env    []string
}

func newUser(t *testing.T, proxy string) *user {
	t.Helper()
	u := &user{gopath: t.TempDir()}
	env, err := proxyEnv(t.Context(), proxy, u.gopath)
	if err != nil {
		t.Fatal(err)
	}
	u.env = env
	return u
}

// dir is a new empty folder outside the checkout.
func (u *user) dir(t *testing.T) string { return t.TempDir() }

func (u *user) cmd(t *testing.T, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir, cmd.Env = dir, u.env
	return cmd
}

// run runs a command as the user in dir and returns its trimmed standard
// output; it fails the test, with all the command printed, on an error.
func (u *user) run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := u.cmd(t, dir, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// readmeLine is the line of README.md that starts with prefix.
func readmeLine(t *testing.T, prefix string) string {
	t.Helper()
	for line := range strings.Lines(readme(t)) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("README.md: no line starts with %q", prefix)
	return ""
}

func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// goBlock matches a ```go block of Markdown.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```\n")

// readmeProgram is a main package around the README's example (its first
// Go block) and its consumer.Loop block, as an application would hold them.
func readmeProgram(t *testing.T) string {
	t.Helper()
	var example, loop string
	for _, m := range goBlock.FindAllStringSubmatch(readme(t), -1) {
		switch {
		case example == "" && strings.HasPrefix(m[1], "st, err := mqlite.Open("):
			example = m[1]
		case loop == "" && strings.HasPrefix(m[1], "err = consumer.Loop(ctx, st,"):
			loop = m[1]
		}
	}
	if example == "" || loop == "" {
		t.Fatal("README.md: no Go block of the example (st, err := mqlite.Open) or of consumer.Loop")
	}
	return `package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

func main() {
	if err := run(context.Background(), os.Args[1]); err != nil {
		log.Fatal(err)
	}
}

func ship(ctx context.Context, body []byte) error { return nil }

func run(ctx context.Context, path string) error {
` + example + `	if err != nil {
		return err
	}
` + loop + `	return err
}
`
}

// TestFromClone runs the README's demo line from a copy of the checkout
// (the files a clone would have) with nothing installed: the committed
// go.work builds cmd/mqlite and the modules it requires from the copy.
func TestFromClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/mqlite in a copy of the checkout; make test runs it")
	}
	t.Parallel()
	clone := t.TempDir()
	files, err := gitFiles(t.Context(), repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		copyFile(t, filepath.Join(repoRoot, f), filepath.Join(clone, f))
	}
	line := readmeLine(t, "go run -C cmd/mqlite . demo")
	cmd := exec.CommandContext(t.Context(), "sh", "-c", line)
	cmd.Dir = clone
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "GOWORK" && name != "GOFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `queue "orders" now:`) {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}
