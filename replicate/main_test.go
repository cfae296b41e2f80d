package replicate_test

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// TestMain quiets Litestream's restore and follow logs, which go to
// slog.Default when a replica has no database (a Standby), and runs goleak.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.DiscardHandler))
	goleak.VerifyTestMain(m)
}
