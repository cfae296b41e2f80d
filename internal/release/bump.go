package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/mod/modfile"
)

// bump makes version the one at which the modules under root require each
// other: every such require line of every go.mod, and go.work's replaces,
// which point that version at each module's folder. It writes nothing
// unless version is a release's (vX.Y.Z). The CHANGELOG.md section is the
// releaser's to write.
func bump(root string, mods []goModule, version string) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	inRepo := modulePaths(mods)
	for _, m := range mods {
		for _, r := range m.File.Require {
			if inRepo[r.Mod.Path] {
				if err := m.File.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
			}
		}
		data, err := m.File.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), data, 0o644); err != nil {
			return err
		}
	}
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return err
	}
	// Each replace of a module of the repository moves to version in
	// place, its line and block kept; a module without one gets one.
	replaced := map[string]bool{}
	for _, r := range w.Replace {
		if !inRepo[r.Old.Path] || r.Old.Version == "" {
			continue
		}
		tok := r.Syntax.Token
		i := slices.Index(tok, r.Old.Path)
		if i < 0 || i+1 >= len(tok) || tok[i+1] != r.Old.Version {
			return fmt.Errorf("go.work:%d: replace %s: unexpected form", r.Syntax.Start.Line, r.Old.Path)
		}
		tok[i+1] = version
		replaced[r.Old.Path] = true
	}
	for _, m := range mods {
		if replaced[m.Path] {
			continue
		}
		dir := "./" + m.Dir
		if m.Dir == "." {
			dir = "."
		}
		if err := w.AddReplace(m.Path, version, dir, ""); err != nil {
			return fmt.Errorf("go.work: %w", err)
		}
	}
	w.Cleanup()
	return os.WriteFile(name, modfile.Format(w.Syntax), 0o644)
}
