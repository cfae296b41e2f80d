// Package buildinfo reads which version of mqlite a binary was built with,
// from the build information the go command writes into it.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// modulePath is the module whose version Version reports: the library.
const modulePath = "github.com/mqlite/mqlite"

// Devel is the version of a build from a checkout (a workspace, or a
// replace to a folder), as the go command writes it.
const Devel = "(devel)"

// Version is the version of the module github.com/mqlite/mqlite in the
// running binary: "v0.1.0" in an application (or an mqlite command) built
// against that release, Devel in one built from a checkout or without build
// information. It reads the build information once; safe for concurrent
// use.
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Devel
	}
	return moduleVersion(bi)
})

// moduleVersion finds the library's version in bi: the main module's when
// the binary is the library's own (its tests), else its dependency's, or
// that of the module replacing it.
func moduleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		return orDevel(bi.Main.Version)
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			return orDevel(d.Replace.Version)
		}
		return orDevel(d.Version)
	}
	return Devel
}

// orDevel is v, or Devel for no version.
func orDevel(v string) string {
	if v == "" {
		return Devel
	}
	return v
}
