package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/conformance"
)

// mutantEnv tells TestConformanceMutant, in the child process
// TestEffectsControl starts, to run the Effects area against the store
// with the completion moved out of the transaction.
const mutantEnv = "MQLITE_EFFECTS_MUTANT"

// completionOutside runs fn's sends in Store.Tx and the completions after
// its commit, each on its own (Store.Complete), as an ack after a publish.
func completionOutside(st *mqlite.Store) effectsFunc {
	return func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
		var later []mqlite.Lock
		err := st.Tx(ctx, func(tx *mqlite.Tx) error {
			ops := effectsOn(tx.Context(), tx.SQL())
			ops.Complete = func(l mqlite.Lock) error { later = append(later, l); return nil }
			return fn(ops)
		})
		if err != nil {
			return err
		}
		for _, l := range later {
			if err := st.Complete(ctx, l); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestEffectsControl shows the Effects area can fail on the store: run in
// a child process against completionOutside, Effects/LockLostCommitsNothing
// fails (the onward message commits, then the completion finds its lease
// lapsed).
func TestEffectsControl(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformanceMutant$/^Effects$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mutantEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the Effects area passed with the completion outside the transaction:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL: TestConformanceMutant/Effects/LockLostCommitsNothing ") {
		t.Fatalf("Effects/LockLostCommitsNothing did not fail with the completion outside the transaction:\n%s", out)
	}
}

// TestConformanceMutant runs the kit with the completion outside the
// transaction, when TestEffectsControl asks; it is skipped otherwise.
func TestConformanceMutant(t *testing.T) {
	t.Parallel()
	if os.Getenv(mutantEnv) == "" {
		t.Skip("TestEffectsControl runs it against a mutant")
	}
	conformance.Run(t, embedded(viaStoreTx, completionOutside))
}
