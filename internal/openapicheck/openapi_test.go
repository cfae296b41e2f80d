package openapicheck

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestDocumentIsValid loads docs/openapi.json and validates it as an
// OpenAPI document: every $ref resolves, every schema is well formed,
// every path parameter is declared, every operation id is unique.
func TestDocumentIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ops := 0
	for _, item := range doc.Paths.Map() {
		ops += len(item.Operations())
	}
	if ops < 40 {
		t.Errorf("%d operations, want every route of the broker", ops)
	}
}
