package broker

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// referenceDoc is the broker's reference for people: a heading
// "### METHOD /path" (a query string after the path is an example) per
// route.
const referenceDoc = "../docs/api-reference-broker.md"

// TestReferenceNamesEveryRoute holds docs/api-reference-broker.md to the
// route table, as TestOpenAPI holds the OpenAPI document: a heading for
// every route, and no heading for a route that is not served.
func TestReferenceNamesEveryRoute(t *testing.T) {
	t.Parallel()
	s := newTestServer(t)
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^#{2,4} (GET|POST|PUT|DELETE|PATCH) (/\S*)`)
	var documented []string
	for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
		path, _, _ := strings.Cut(m[2], "?")
		documented = append(documented, m[1]+" "+path)
	}
	var served []string
	for _, e := range s.eps {
		served = append(served, e.pattern)
	}
	for p := range openRoutes {
		served = append(served, p)
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but %s has no heading for it", r, referenceDoc)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s has a heading for %s, which the broker does not serve", referenceDoc, r)
		}
	}
}
