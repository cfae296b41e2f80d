package engine

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletedIsNamedOnce keeps the completed state in one place: no
// library file but state.go spells it in SQL ('completed'), and
// schema/layout.sql spells it only in its CHECK of the state column, the
// CHECK that ties it to settled_at, and the condition live, word for word
// (optionally of a table alias), so that the engine's statements and the
// layout's index and triggers say the same thing. The schema package's
// migrations, which speak of earlier layouts, are left out.
func TestCompletedIsNamedOnce(t *testing.T) {
	t.Parallel()
	const word = `'` + StateCompleted + `'`
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bench", "testdata", "schema", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || d.Name() == "state.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), word) {
			t.Errorf("%s spells %s: name the state through internal/engine/state.go", path, word)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	layout, err := os.ReadFile(filepath.Join(root, "schema", "layout.sql"))
	if err != nil {
		t.Fatal(err)
	}
	rest := string(layout)
	for _, allowed := range []string{
		`state = 'scheduled' OR state = 'completed' OR state = 'dead_lettered'`, // the state column's CHECK
		`CHECK ((state = 'completed') = (settled_at IS NOT NULL))`,
		`NEW.state IN ('dead_lettered', 'completed')`, // the trigger that sees a front leave
		live,
	} {
		rest = strings.ReplaceAll(rest, allowed, "")
	}
	for _, line := range strings.Split(rest, "\n") {
		if strings.Contains(line, word) {
			t.Errorf("schema/layout.sql spells %s outside the condition live (%s): %q", word, live, line)
		}
	}
}
