package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the engine leaves a goroutine behind.
// The sentinels need no setting up: they are constants of package errs.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
