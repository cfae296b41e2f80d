package mqlite

import (
	"errors"
	"testing"

	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/errs"
)

// TestEngineSpeaksTheRootNames: the engine writes the dead-letter reasons and
// the states the root package documents, and wraps the root's sentinels.
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
	for name, pair := range map[string][2]error{
		"ErrLockLost":        {errs.ErrLockLost, ErrLockLost},
		"ErrQueueNotFound":   {errs.ErrQueueNotFound, ErrQueueNotFound},
		"ErrDiskFull":        {errs.ErrDiskFull, ErrDiskFull},
		"ErrAttemptConflict": {errs.ErrAttemptConflict, ErrAttemptConflict},
		"ErrInvalidMessage":  {errs.ErrInvalidMessage, ErrInvalidMessage},
	} {
		if pair[0] != pair[1] {
			t.Errorf("errs.%s is not mqlite.%s", name, name)
		}
	}
	err := errs.Invalidf(ErrInvalidTTL, "TTL %d", -1)
	var ia *InvalidArgumentError
	if !errors.As(err, &ia) || ia.Kind != ErrInvalidTTL || ia.Detail != "TTL -1" {
		t.Fatalf("errs.Invalidf: %#v, want an *InvalidArgumentError of ErrInvalidTTL", err)
	}
	if !errors.Is(err, ErrInvalidArgument) || !errors.Is(err, ErrInvalidTTL) {
		t.Fatalf("%v matches neither ErrInvalidArgument nor ErrInvalidTTL", err)
	}
}
