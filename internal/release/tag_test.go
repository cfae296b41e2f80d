package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestTagDryRun runs what make release VERSION=... DRY_RUN=1 runs, on a
// committed copy of the checkout's module files: it names one tag per
// module, the root's bare, and creates none; then the real run creates
// exactly those.
func TestTagDryRun(t *testing.T) {
	t.Parallel()
	version := repoVersion(t)
	root := gitRepo(t)

	var out bytes.Buffer
	if err := tagRelease(t.Context(), tagParams{Root: root, Version: version, DryRun: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range mods {
		want = append(want, m.Tag(version))
	}
	if got := strings.Fields(strings.ReplaceAll(out.String(), "would tag", "")); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("dry run printed %q, want the tags %q", out.String(), want)
	}
	if want[0] != version || !strings.Contains(strings.Join(want, " "), "cmd/mqlite/"+version) {
		t.Fatalf("tags %q: want %s and cmd/mqlite/%s among them", want, version, version)
	}
	if tags := mustGit(t, root, "tag", "--list"); tags != "" {
		t.Fatalf("dry run created tags:\n%s", tags)
	}

	out.Reset()
	if err := tagRelease(t.Context(), tagParams{Root: root, Version: version, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(mustGit(t, root, "tag", "--list")); len(got) != len(want) {
		t.Fatalf("tags after the release: %q, want %q", got, want)
	}
}

// TestTagRefuses: a release is refused, and nothing tagged, for each
// reason below.
func TestTagRefuses(t *testing.T) {
	t.Parallel()
	version := repoVersion(t)
	for _, tc := range []struct {
		name    string
		edit    func(t *testing.T, root string)
		version string // the version released; the repository's if empty
		want    string
	}{
		{
			name: "uncommitted change",
			edit: func(t *testing.T, root string) {
				appendFile(t, filepath.Join(root, "go.work"), "\n")
			},
			want: "uncommitted changes",
		},
		{
			name:    "no changelog section",
			version: "v99.0.0",
			want:    "CHANGELOG.md: no section ## [99.0.0]",
		},
		{
			name: "modules require another version",
			edit: func(t *testing.T, root string) {
				editFile(t, filepath.Join(root, "cmd/mqlite/go.mod"), "github.com/mqlite/mqlite/relay/nats "+version, "github.com/mqlite/mqlite/relay/nats v0.0.1")
				mustGit(t, root, "commit", "-q", "-a", "-m", "edit")
			},
			want: "requires github.com/mqlite/mqlite/relay/nats v0.0.1",
		},
		{
			name: "tag exists",
			edit: func(t *testing.T, root string) {
				mustGit(t, root, "tag", "relay/nats/"+version)
			},
			want: "tag relay/nats/" + version + " exists",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := gitRepo(t)
			if tc.edit != nil {
				tc.edit(t, root)
			}
			tagsBefore := mustGit(t, root, "tag", "--list")
			released := tc.version
			if released == "" {
				released = version
			}
			var out bytes.Buffer
			err := tagRelease(t.Context(), tagParams{Root: root, Version: released, Out: &out})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("tagRelease: %v, want an error with %q", err, tc.want)
			}
			if tags := mustGit(t, root, "tag", "--list"); tags != tagsBefore || out.Len() != 0 {
				t.Fatalf("refused release tagged %q (before: %q), printed %q", tags, tagsBefore, out.String())
			}
		})
	}
}

// gitRepo is a Git repository with one commit: the checkout's module files.
func gitRepo(t *testing.T) string {
	t.Helper()
	root := copyModFiles(t)
	mustGit(t, root, "init", "-q")
	mustGit(t, root, "add", "-A")
	mustGit(t, root, "commit", "-q", "-m", "modules")
	return root
}

// mustGit runs git in dir with a committer of its own.
func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(t.Context(), dir, append([]string{"-c", "user.name=release test", "-c", "user.email=release-test@localhost", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
