//go:build crash_injection

package schema_test

// make crash kills the upgrade after every step and at many more random
// moments: 48 spread over the fixtures (5 or 4 each for the ten), where
// the five fixtures before mqlite-schema-8 had 10 each, so that the later
// fixtures' kills keep the test's time flat.
func init() { migrationRandomKills, migrationStepKills = 48, 0 }
