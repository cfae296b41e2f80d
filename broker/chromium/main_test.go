package chromium_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite/internal/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// quiet is a logger that drops everything.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve starts a broker for cfg; see brokertest.Serve.
var serve = brokertest.Serve
