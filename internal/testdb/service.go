package testdb

import (
	"os"
	"testing"
)

// MissingService skips t because the service or tool what is not available
// (why says how it failed), or fails t when MQLITE_REQUIRE_SERVICES=1: CI
// runs every test, a developer's machine runs what it has.
func MissingService(t testing.TB, what string, why error) {
	t.Helper()
	if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s is required (MQLITE_REQUIRE_SERVICES=1) but unavailable: %v", what, why)
	}
	t.Skipf("%s unavailable: %v", what, why)
}
