package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite/internal/buildinfo"
	"github.com/mqlite/mqlite/schema"
)

// versionInfo is what "mqlite version" prints: the build, read from the
// binary's build information.
type versionInfo struct {
	// Version is the module version "go install ...@v1.2.3" built, or
	// "(devel)" for a build from a checkout (or one without build
	// information). Every module is released at one version, so it is
	// also the library's.
	Version string `json:"version"`
	// Commit, CommitTime and Modified describe the checkout a local build
	// came from (empty for "go install ...@version").
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
	// SQLite is the SQLite library inside (modernc.org/sqlite's), and
	// Driver the driver module's version.
	SQLite string `json:"sqlite"`
	Driver string `json:"sqlite_driver"`
	// Schema is the layout token of the stores this binary opens.
	Schema string `json:"schema"`
}

// Short is the one line of --version.
func (v versionInfo) Short() string {
	s := v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (" + c
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s, %s, SQLite %s", s, v.Go, v.SQLite)
}

// buildVersion reads the binary's build information once.
var buildVersion = sync.OnceValue(func() versionInfo {
	v := versionInfo{Version: buildinfo.Devel, SQLite: sqliteVersion(), Schema: schema.Token}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "modernc.org/sqlite" {
			v.Driver = d.Version
		}
	}
	return v
})

// sqliteVersion asks the SQLite library linked into the binary.
func sqliteVersion() string {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "unknown"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(context.Background(), `SELECT sqlite_version()`).Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version, the commit, and the Go and SQLite versions of this binary",
		Example: `  mqlite version
  mqlite --version`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "mqlite\t%s\n", v.Version)
				if v.Commit != "" {
					modified := ""
					if v.Modified {
						modified = " (modified)"
					}
					fmt.Fprintf(w, "commit\t%s %s%s\n", v.Commit, v.CommitTime, modified)
				}
				fmt.Fprintf(w, "go\t%s\nsqlite\t%s (modernc.org/sqlite %s)\nschema\t%s\n", v.Go, v.SQLite, v.Driver, v.Schema)
			})
		},
	}
}
