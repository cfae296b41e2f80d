//go:build crash_injection

package schema_test

// make crash kills the upgrade at many more random moments.
func init() { migrationRandomKills = 60 }
