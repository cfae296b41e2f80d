//go:build crash_injection

package schema_test

// make crash kills the upgrade after every step and at many more random
// moments.
func init() { migrationRandomKills, migrationStepKills = 10, 0 }
