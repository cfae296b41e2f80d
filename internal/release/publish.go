package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// publish writes the modules under root, at version, into dir in the
// layout of a module proxy (GOPROXY=file://dir): for each, its list, its
// .info, its go.mod and its zip in Go's module zip format. A module's zip
// holds the files Git would commit in its folder (tracked, or new and not
// ignored), less those of the modules nested in it.
func publish(ctx context.Context, root string, mods []goModule, version, dir string) error {
	files, err := gitFiles(ctx, root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if err := publishModule(root, m, version, dir, files); err != nil {
			return fmt.Errorf("publish %s: %w", m.Path, err)
		}
	}
	return nil
}

// publishModule writes one module at version into the proxy folder dir.
func publishModule(root string, m goModule, version, dir string, files []string) error {
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	mv := module.Version{Path: m.Path, Version: version}
	var zipped bytes.Buffer
	if err := modzip.Create(&zipped, mv, moduleFiles(root, m, files)); err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".zip":  zipped.Bytes(),
		version + ".mod":  goMod,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gitFiles lists, relative to root in slash form, the files Git would
// commit: tracked and present, or new and not ignored.
func gitFiles(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}

// moduleFiles are the files under m's folder, named relative to it; the
// zip package leaves out those of nested modules.
func moduleFiles(root string, m goModule, files []string) []modzip.File {
	prefix := m.Dir + "/"
	if m.Dir == "." {
		prefix = ""
	}
	var out []modzip.File
	for _, f := range files {
		if rel, ok := strings.CutPrefix(f, prefix); ok {
			out = append(out, diskFile{rel: rel, name: filepath.Join(root, filepath.FromSlash(f))})
		}
	}
	return out
}

// diskFile is a file of the checkout as the zip package reads it.
type diskFile struct {
	rel  string // its path inside the module, slash-separated
	name string // its path on disk
}

func (f diskFile) Path() string                 { return path.Clean(f.rel) }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.name) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.name) }
