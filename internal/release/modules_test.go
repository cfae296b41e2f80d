package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../.."

// TestRepoReleasable holds the checkout to what a release needs: one
// version that every module requires the others at, no replace to the
// checkout in a committed go.mod, a go.work that builds every module from
// here, and CHANGELOG.md's section for that version.
func TestRepoReleasable(t *testing.T) {
	t.Parallel()
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	version := repoVersion(t)
	if err := checkTree(repoRoot, mods, version); err != nil {
		t.Fatal(err)
	}
	if err := checkChangelog(repoRoot, version); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".", "cmd/mqlite", "relay/nats", "relay/amqp", "relay/kafka", "replicate", "gormtx", "watermill", "powerloss", "internal/release"} {
		if !hasModule(mods, want) {
			t.Errorf("no module found in %s", want)
		}
	}
}

// TestCheckTreeRefuses is the control of TestRepoReleasable: each change
// below, made to a copy of the checkout's go.mod and go.work files, is
// reported, with the file and what is wrong.
func TestCheckTreeRefuses(t *testing.T) {
	t.Parallel()
	version := repoVersion(t)
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, root string)
		version string // the version checked; the repository's if empty
		want    string
	}{
		{
			name: "replace to the checkout",
			edit: func(t *testing.T, root string) {
				appendFile(t, filepath.Join(root, "cmd/mqlite/go.mod"), "\nreplace github.com/mqlite/mqlite => ../..\n")
			},
			want: "cmd/mqlite/go.mod:",
		},
		{
			name: "replace of another module",
			edit: func(t *testing.T, root string) {
				appendFile(t, filepath.Join(root, "relay/nats/go.mod"), "\nreplace github.com/nats-io/nats.go => github.com/nats-io/nats.go v1.50.0\n")
			},
			want: "relay/nats/go.mod:",
		},
		{
			name: "a module of the repository at another version",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, "relay/kafka/go.mod"), "github.com/mqlite/mqlite "+version, "github.com/mqlite/mqlite v0.0.0")
			},
			want: "requires github.com/mqlite/mqlite v0.0.0, want " + version,
		},
		{
			name: "a module go.work does not use",
			edit: func(t *testing.T, root string) {
				writeFile(t, filepath.Join(root, "relay/extra/go.mod"), "module github.com/mqlite/mqlite/relay/extra\n\ngo 1.26.8\n")
			},
			want: "go.work: no use of relay/extra",
		},
		{
			name:    "not a release version",
			version: "v0.1",
			want:    `version "v0.1": not of the form vX.Y.Z`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := copyModFiles(t)
			if tc.edit != nil {
				tc.edit(t, root)
			}
			mods, err := findModules(root)
			if err != nil {
				t.Fatal(err)
			}
			checked := tc.version
			if checked == "" {
				checked = version
			}
			err = checkTree(root, mods, checked)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkTree: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestReleaseVersionDisagrees(t *testing.T) {
	t.Parallel()
	root := copyModFiles(t)
	editFile(t, filepath.Join(root, "relay/kafka/go.mod"), "github.com/mqlite/mqlite "+repoVersion(t), "github.com/mqlite/mqlite v1.9.9")
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := releaseVersion(mods); err == nil {
		t.Fatalf("releaseVersion = %s, want an error for two versions", v)
	}
}

// repoVersion is the version at which the checkout's modules require
// each other.
func repoVersion(t *testing.T) string {
	t.Helper()
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	version, err := releaseVersion(mods)
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// copyModFiles copies go.work, CHANGELOG.md and every go.mod of the
// checkout into a new folder, each at its place.
func copyModFiles(t *testing.T) string {
	t.Helper()
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, name := range []string{"go.work", "CHANGELOG.md"} {
		copyFile(t, filepath.Join(repoRoot, name), filepath.Join(root, name))
	}
	for _, m := range mods {
		copyFile(t, filepath.Join(repoRoot, m.Dir, "go.mod"), filepath.Join(root, m.Dir, "go.mod"))
	}
	return root
}

func hasModule(mods []goModule, dir string) bool {
	for _, m := range mods {
		if m.Dir == dir {
			return true
		}
	}
	return false
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(data))
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, name, data string) {
	t.Helper()
	old, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, name, string(old)+data)
}

// editFile replaces old, which must be there, with new in the file name.
func editFile(t *testing.T, name, old, new string) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s: no %q", name, old)
	}
	writeFile(t, name, strings.Replace(string(data), old, new, 1))
}

// TestBump moves a copy of the checkout's module files to another version:
// after it, the copy passes checkTree at that version (every require and
// go.work's replaces moved) and no other line of a go.mod or of go.work
// changed.
func TestBump(t *testing.T) {
	t.Parallel()
	const next = "v0.99.0"
	root := copyModFiles(t)
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := bump(root, mods, "v1.2"); err == nil {
		t.Fatal("bump to v1.2: no error, want it refused")
	}
	if err := bump(root, mods, next); err != nil {
		t.Fatal(err)
	}
	bumped, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := releaseVersion(bumped); err != nil || v != next {
		t.Fatalf("releaseVersion after bump = %s, %v; want %s", v, err, next)
	}
	if err := checkTree(root, bumped, next); err != nil {
		t.Fatal(err)
	}
	old := repoVersion(t)
	for _, m := range bumped {
		before, err := os.ReadFile(filepath.Join(repoRoot, m.Dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		after, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(string(before), " "+old+"\n", " "+next+"\n"); string(after) != want {
			t.Errorf("%s/go.mod after bump:\n%s\nwant:\n%s", m.Dir, after, want)
		}
	}
	before, err := os.ReadFile(filepath.Join(repoRoot, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(string(before), " "+old+" => ", " "+next+" => "); string(after) != want {
		t.Errorf("go.work after bump:\n%s\nwant:\n%s", after, want)
	}
}
