//go:build crash_injection

package crashtest_test

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/pgtest"
)

// The crash tests on PostgreSQL: the same workers and checks as on a
// SQLite file, the store a schema of the shared server (pgtest.URL). A
// killed worker's leases are not released when the next one opens the
// store (another process may hold them): they lapse, and a claim or the
// reaper takes them back.

const (
	pgKills  = wantKills
	pgBudget = 150 * time.Second
)

// TestCrashLoopTxPostgres is TestCrashLoopTx on PostgreSQL.
func TestCrashLoopTxPostgres(t *testing.T) {
	crashLoopTx(t, setupEffectsOn(t, pgtest.URL(t)), pgKills, minKills, pgBudget)
}

// TestCrashLoopTxPostgresControl is TestCrashLoopTxControl on PostgreSQL.
func TestCrashLoopTxPostgresControl(t *testing.T) {
	loopTxControl(t, setupEffectsOn(t, pgtest.URL(t)))
}
