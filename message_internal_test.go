package mqlite

import (
	"testing"

	"github.com/mqlite/mqlite/internal/engine"
)

// TestEngineSpeaksTheRootNames: the engine writes the dead-letter reasons and
// the states the root package documents, and enforces the limits the root
// exports (the root spells their values out, so that go doc shows them).
func TestEngineSpeaksTheRootNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ engine, root string }{
		{engine.ReasonMaxDelivery, ReasonMaxDelivery},
		{engine.ReasonTTL, ReasonTTL},
	} {
		if tc.engine != tc.root {
			t.Errorf("engine writes reason %q, the root documents %q", tc.engine, tc.root)
		}
	}
	for _, tc := range []struct {
		name         string
		engine, root int64
	}{
		{"MaxMessageIDLen", engine.MaxMessageIDLen, MaxMessageIDLen},
		{"MaxGroupIDLen", engine.MaxGroupIDLen, MaxGroupIDLen},
		{"MaxSubjectLen", engine.MaxSubjectLen, MaxSubjectLen},
		{"MaxPropertiesBytes", engine.MaxPropertiesBytes, MaxPropertiesBytes},
		{"MaxTTL", int64(engine.MaxTTL), int64(MaxTTL)},
		{"MaxDelay", int64(engine.MaxDelay), int64(MaxDelay)},
	} {
		if tc.engine != tc.root {
			t.Errorf("%s: the engine enforces %d, the root exports %d", tc.name, tc.engine, tc.root)
		}
	}
}
