package groupcommit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMachineryImports: the transaction machinery's packages import
// neither the root package nor the engine (go list -deps), so that the
// root depends on them and never the other way.
func TestMachineryImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	pkgs := []string{"groupcommit", "handoff", "receivers", "tally", "txmark"}
	for i, p := range pkgs {
		pkgs[i] = "github.com/mqlite/mqlite/internal/" + p
	}
	out, err := exec.Command(goTool, append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/mqlite/mqlite" || dep == "github.com/mqlite/mqlite/internal/engine" {
			t.Errorf("the machinery imports %s", dep)
		}
	}
}
