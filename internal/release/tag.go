package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// tagParams is one release: the repository, the version, and whether to
// only say what would be tagged.
type tagParams struct {
	Root    string
	Version string
	DryRun  bool
	Out     io.Writer
}

// tagRelease checks that the tree under p.Root can be released at
// p.Version (every module requires the others at it, go.work agrees,
// nothing uncommitted, CHANGELOG.md has its entry, no tag of it exists
// yet), then tags HEAD once per module, the root first. The tags stay
// local: pushing them is the releaser's step. With p.DryRun it prints the
// tags and creates none.
func tagRelease(ctx context.Context, p tagParams) error {
	mods, err := findModules(p.Root)
	if err != nil {
		return err
	}
	errs := []error{checkTree(p.Root, mods, p.Version), checkChangelog(p.Root, p.Version)}
	if out, err := git(ctx, p.Root, "status", "--porcelain"); err != nil {
		errs = append(errs, err)
	} else if out != "" {
		errs = append(errs, fmt.Errorf("uncommitted changes:\n%s", out))
	}
	for _, m := range mods {
		if _, err := git(ctx, p.Root, "rev-parse", "-q", "--verify", "refs/tags/"+m.Tag(p.Version)); err == nil {
			errs = append(errs, fmt.Errorf("tag %s exists", m.Tag(p.Version)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release %s refused:\n%w", p.Version, err)
	}
	for _, m := range mods {
		tag := m.Tag(p.Version)
		if p.DryRun {
			fmt.Fprintf(p.Out, "would tag %s\n", tag)
			continue
		}
		if _, err := git(ctx, p.Root, "tag", tag); err != nil {
			return err
		}
		fmt.Fprintf(p.Out, "tagged %s\n", tag)
	}
	return nil
}

// checkChangelog checks that root's CHANGELOG.md has a section for
// version, headed "## [X.Y.Z]" as Keep a Changelog writes it.
func checkChangelog(root, version string) error {
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	heading := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(strings.TrimPrefix(version, "v")) + `\]`)
	if !heading.Match(data) {
		return fmt.Errorf("CHANGELOG.md: no section ## [%s]", strings.TrimPrefix(version, "v"))
	}
	return nil
}

// git runs git in dir, killed when ctx is cancelled, and returns its
// standard output, or an error that carries its standard error.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
