package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// rootPath is the module path of the library; every other module of the
// repository sits below it.
const rootPath = "github.com/mqlite/mqlite"

// goModule is one module of the repository.
type goModule struct {
	// Path is the module path, Dir its folder relative to the repository's
	// root in slash form ("." for the root, "cmd/mqlite").
	Path, Dir string
	// File is its parsed go.mod.
	File *modfile.File
}

// Tag is the Git tag that releases the module at version: the version
// itself for the root, the folder before it for the others, the form the
// go command looks for in a repository of several modules.
func (m goModule) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// findModules reads every go.mod under root, skipping hidden folders and
// testdata, in folder order (the root first).
func findModules(root string) ([]goModule, error) {
	var mods []goModule
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module line", p)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		mods = append(mods, goModule{Path: f.Module.Mod.Path, Dir: filepath.ToSlash(rel), File: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods, func(a, b goModule) int { return strings.Compare(a.Dir, b.Dir) })
	if len(mods) == 0 || mods[0].Dir != "." || mods[0].Path != rootPath {
		return nil, fmt.Errorf("%s: not the root of %s", root, rootPath)
	}
	return mods, nil
}

// releaseVersion is the one version at which the modules require each
// other, or an error when they name none or several.
func releaseVersion(mods []goModule) (string, error) {
	inRepo := modulePaths(mods)
	seen := map[string]bool{}
	for _, m := range mods {
		for _, r := range m.File.Require {
			if inRepo[r.Mod.Path] {
				seen[r.Mod.Version] = true
			}
		}
	}
	versions := slices.Sorted(func(yield func(string) bool) {
		for v := range seen {
			if !yield(v) {
				return
			}
		}
	})
	if len(versions) != 1 {
		return "", fmt.Errorf("the modules require each other at %d versions %v, want one", len(versions), versions)
	}
	return versions[0], nil
}

// checkTree returns every way the modules under root would not install
// at version from a module proxy, joined: a go.mod with a replace
// directive (go install pkg@version refuses the module, and a user's build
// ignores the directive), a
// requirement of a module of the repository at another version, a
// version that is not a release's, and a go.work that does not use every
// module or does not point the version of each at its folder.
func checkTree(root string, mods []goModule, version string) error {
	var errs []error
	if err := checkVersion(version); err != nil {
		errs = append(errs, err)
	}
	inRepo := modulePaths(mods)
	for _, m := range mods {
		file := path.Join(m.Dir, "go.mod")
		for _, r := range m.File.Replace {
			errs = append(errs, fmt.Errorf("%s:%d: replace %s => %s: a committed go.mod names no replace (go install refuses the module, a user's build ignores it; go.work points at the checkout)",
				file, r.Syntax.Start.Line, r.Old.Path, r.New.Path))
		}
		for _, r := range m.File.Require {
			if inRepo[r.Mod.Path] && r.Mod.Version != version {
				errs = append(errs, fmt.Errorf("%s:%d: requires %s %s, want %s",
					file, r.Syntax.Start.Line, r.Mod.Path, r.Mod.Version, version))
			}
		}
	}
	errs = append(errs, checkWork(root, mods, version))
	return errors.Join(errs...)
}

// checkVersion refuses a version that is not a release's: vX.Y.Z, with a
// pre-release suffix at most.
func checkVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return fmt.Errorf("version %q: not of the form vX.Y.Z", version)
	}
	return nil
}

// checkWork checks that root's go.work uses every module and replaces
// each at version with its own folder.
func checkWork(root string, mods []goModule, version string) error {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, u := range w.Use {
		used[path.Clean(filepath.ToSlash(u.Path))] = true
	}
	replaced := map[string]string{}
	for _, r := range w.Replace {
		if r.Old.Version == version {
			replaced[r.Old.Path] = path.Clean(filepath.ToSlash(r.New.Path))
		}
	}
	var errs []error
	for _, m := range mods {
		if !used[m.Dir] {
			errs = append(errs, fmt.Errorf("go.work: no use of %s", m.Dir))
		}
		if replaced[m.Path] != m.Dir {
			errs = append(errs, fmt.Errorf("go.work: no replace %s %s => ./%s", m.Path, version, m.Dir))
		}
	}
	return errors.Join(errs...)
}

// modulePaths is the set of the modules' paths.
func modulePaths(mods []goModule) map[string]bool {
	set := make(map[string]bool, len(mods))
	for _, m := range mods {
		set[m.Path] = true
	}
	return set
}
