package mqlite

import (
	"testing"

	"github.com/mqlite/mqlite/internal/engine"
)

// TestEngineSpeaksTheRootNames: the engine writes the dead-letter reasons and
// the states the root package documents.
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
}
