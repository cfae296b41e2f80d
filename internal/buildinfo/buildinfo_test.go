package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestModuleVersion(t *testing.T) {
	t.Parallel()
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"the library's own binary", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.2.0"}}, "v0.2.0"},
		{"the library's own test", debug.BuildInfo{Main: debug.Module{Path: modulePath}}, Devel},
		{"an application requiring a release", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app", Version: "v1.4.0"},
			Deps: []*debug.Module{dep("modernc.org/sqlite", "v1.62.0", nil), dep(modulePath, "v0.1.0", nil)},
		}, "v0.1.0"},
		{"the mqlite command from a checkout", debug.BuildInfo{
			Main: debug.Module{Path: modulePath + "/cmd/mqlite", Version: Devel},
			Deps: []*debug.Module{dep(modulePath, Devel, nil)},
		}, Devel},
		{"replaced by a folder", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(modulePath, "v0.1.0", &debug.Module{Path: "../mqlite"})},
		}, Devel},
		{"replaced by a fork's version", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(modulePath, "v0.1.0", &debug.Module{Path: "example.com/fork", Version: "v0.1.1-fork"})},
		}, "v0.1.1-fork"},
		{"a sub-module is not the library", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(modulePath+"/relay/nats", "v0.1.0", nil)},
		}, Devel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := moduleVersion(&tc.bi); got != tc.want {
				t.Fatalf("moduleVersion = %q, want %q", got, tc.want)
			}
		})
	}
}
