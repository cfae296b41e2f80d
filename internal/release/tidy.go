package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// tidy runs go mod tidy in each of mods (its output to out), outside the workspace, as a user
// of the release would resolve them. go mod tidy ignores go.work, and the
// modules require each other at a version no proxy serves until it is
// tagged; so the tree is first published at that version to a proxy in a
// temporary folder, ahead of the machine's (and of the local module
// cache's download folder, which holds the third-party modules already
// fetched). The module cache is a temporary one too, so the published
// copies never enter the real one. The go.sum lines of the repository's
// own modules are dropped after: they hash the temporary copies, not the
// tagged release, and the workspace does not read them.
func tidy(ctx context.Context, root string, mods []goModule, version string, out io.Writer) error {
	tmp, err := os.MkdirTemp("", "mqlite-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy := filepath.Join(tmp, "proxy")
	if err := publish(ctx, root, mods, version, proxy); err != nil {
		return err
	}
	env, err := proxyEnv(ctx, proxy, filepath.Join(tmp, "gopath"))
	if err != nil {
		return err
	}
	for _, m := range mods {
		dir := filepath.Join(root, filepath.FromSlash(m.Dir))
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go mod tidy in %s: %w", m.Dir, err)
		}
		if err := dropOwnSums(filepath.Join(dir, "go.sum"), mods); err != nil {
			return err
		}
	}
	return nil
}

// proxyEnv is the environment of a go command that resolves the
// repository's modules from the proxy folder, with gopath as its GOPATH
// (and so an empty module cache), outside any workspace.
func proxyEnv(ctx context.Context, proxy, gopath string) ([]string, error) {
	goEnv := func(name string) (string, error) {
		out, err := exec.CommandContext(ctx, "go", "env", name).Output()
		if err != nil {
			return "", fmt.Errorf("go env %s: %w", name, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	if upstream != "" && upstream != "off" {
		proxies += "," + upstream
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOPATH", "GOMODCACHE", "GOBIN", "GOWORK", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOTOOLCHAIN":
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		"GOPATH="+gopath,
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOPROXY="+proxies,
		// The published zips are not the ones a tag will hold: no
		// checksum database knows them.
		"GONOSUMDB="+rootPath,
		// -modcacherw: the temporary module cache can be removed;
		// -trimpath: builds keep the temporary folders out of the build
		// cache's keys, so the next run reuses them.
		"GOFLAGS=-modcacherw -trimpath",
	), nil
}

// dropOwnSums removes from the go.sum file name the lines of mods.
func dropOwnSums(name string, mods []goModule) error {
	data, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	own := modulePaths(mods)
	var kept bytes.Buffer
	for line := range strings.Lines(string(data)) {
		if path, _, _ := strings.Cut(line, " "); !own[path] {
			kept.WriteString(line)
		}
	}
	return os.WriteFile(name, kept.Bytes(), 0o644)
}
