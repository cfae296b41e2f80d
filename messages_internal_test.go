package mqlite

import (
	"testing"

	"github.com/mqlite/mqlite/internal/driver"
)

// TestEngineSpeaksTheRootNames: the engine writes the dead-letter reasons and
// the states the root package documents, and enforces the limits the root
// exports (the root spells their values out, so that go doc shows them).
func TestEngineSpeaksTheRootNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ engine, root string }{
		{driver.ReasonMaxDelivery, ReasonMaxDelivery},
		{driver.ReasonTTL, ReasonTTL},
	} {
		if tc.engine != tc.root {
			t.Errorf("engine writes reason %q, the root documents %q", tc.engine, tc.root)
		}
	}
	for _, tc := range []struct {
		name         string
		engine, root int64
	}{
		{"MaxMessageIDLen", driver.MaxMessageIDLen, MaxMessageIDLen},
		{"MaxGroupIDLen", driver.MaxGroupIDLen, MaxGroupIDLen},
		{"MaxSubjectLen", driver.MaxSubjectLen, MaxSubjectLen},
		{"MaxPropertiesBytes", driver.MaxPropertiesBytes, MaxPropertiesBytes},
		{"MaxTTL", int64(driver.MaxTTL), int64(MaxTTL)},
		{"MaxDelay", int64(driver.MaxDelay), int64(MaxDelay)},
		{"MaxPriority", driver.MaxPriority, MaxPriority},
	} {
		if tc.engine != tc.root {
			t.Errorf("%s: the engine enforces %d, the root exports %d", tc.name, tc.engine, tc.root)
		}
	}
}
