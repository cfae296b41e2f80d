package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublishIsDocumented: installing an untagged tree from a proxy on
// disk is described for users in docs/operations.md, with the publish
// command and the GOPROXY it needs, not only in this tool's comments.
func TestPublishIsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go run ./internal/release publish -dir ", "GOPROXY=file://", "GONOSUMDB=github.com/mqlite/mqlite"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/operations.md does not say %q", want)
		}
	}
}
