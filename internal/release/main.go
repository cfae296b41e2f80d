// Command release checks that the modules of the repository install from a
// module proxy, publishes them to a proxy on disk, and tags a release.
//
// Every module of the repository requires the others at the one version
// the next release will carry; no committed go.mod has a replace to the
// checkout (go.work builds the modules from it during development). From
// the repository's root:
//
//	go run ./internal/release check                 # the modules agree; prints their version
//	go run ./internal/release publish -dir DIR      # the tree at that version, as GOPROXY=file://DIR
//	go run ./internal/release tidy                  # go mod tidy in every module (make tidy)
//	go run ./internal/release bump v0.2.0           # every go.mod and go.work at the next version
//	go run ./internal/release tag -dry-run v0.1.0   # what make release VERSION=v0.1.0 would tag
//	go run ./internal/release tag v0.1.0            # tags HEAD: v0.1.0, cmd/mqlite/v0.1.0, ...
//
// tag refuses, and tags nothing, unless every module requires the others
// at the version, go.work replaces each at it with its folder, the tree
// has no uncommitted change, CHANGELOG.md has the version's section and no
// tag of it exists. It does not push.
//
// go mod tidy and go get ignore go.work, so in a module other than the
// root they fail until the version is published: add the import (and, for
// a new dependency, its require line), then run tidy, which resolves the
// repository's modules from a proxy on disk.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// errUsage is returned for a command line the tool does not take.
var errUsage = errors.New("usage: release check | publish -dir DIR | tidy | bump vX.Y.Z | tag [-dry-run] vX.Y.Z (flags: -root DIR, the repository, default .)")

// run runs one subcommand of the tool with args, writing its report to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("root", ".", "the repository's root")
	dir := fs.String("dir", "", "publish: the proxy folder to write")
	dryRun := fs.Bool("dry-run", false, "tag: check and print the tags, create none")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case args[0] == "tag" && fs.NArg() == 1:
		return tagRelease(ctx, tagParams{Root: *root, Version: fs.Arg(0), DryRun: *dryRun, Out: out})
	case args[0] == "bump" && fs.NArg() == 1:
		mods, err := findModules(*root)
		if err != nil {
			return err
		}
		return bump(*root, mods, fs.Arg(0))
	case (args[0] == "check" || args[0] == "tidy" || args[0] == "publish" && *dir != "") && fs.NArg() == 0:
		mods, err := findModules(*root)
		if err != nil {
			return err
		}
		version, err := releaseVersion(mods)
		if err != nil {
			return err
		}
		if err := checkTree(*root, mods, version); err != nil {
			return err
		}
		switch args[0] {
		case "publish":
			err = publish(ctx, *root, mods, version, *dir)
		case "tidy":
			err = tidy(ctx, *root, mods, version, out)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, version)
		return err
	}
	return errUsage
}
