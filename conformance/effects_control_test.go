package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/conformance"
)

// mutantEnv tells TestConformanceMutant, in the child process
// TestEffectsControl starts, which mutant to run the Effects area against:
// one of mutants' names.
const mutantEnv = "MQLITE_EFFECTS_MUTANT"

// mutants are the broken implementations of Instance.EffectsTx, by name,
// each with the subtest that must fail on it.
var mutants = map[string]struct {
	fx    func(st *mqlite.Store) effectsFunc
	fails string
}{
	"outside": {completionOutside, "LockLostCommitsNothing"},
	"replay":  {completionReplays, "ReRunFindsDeliverySettled"},
}

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

// completionReplays settles in Store.Tx but takes a delivery already
// settled for a replay, as a receipt answers a plain Complete: a
// transaction run again commits its effects again.
func completionReplays(st *mqlite.Store) effectsFunc {
	return func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
		return st.Tx(ctx, func(tx *mqlite.Tx) error {
			ops := effectsOn(tx.Context(), tx.SQL())
			complete, reject := ops.Complete, ops.Reject
			ops.Complete = func(l mqlite.Lock) error { return replays(complete(l)) }
			ops.Reject = func(l mqlite.Lock, reason, description string) error {
				return replays(reject(l, reason, description))
			}
			return fn(ops)
		})
	}
}

// replays is nil for ErrAlreadySettled, else err.
func replays(err error) error {
	if errors.Is(err, mqlite.ErrAlreadySettled) {
		return nil
	}
	return err
}

// TestEffectsControl shows the Effects area can fail on the store: run in
// a child process against each mutant, its subtest fails:
// Effects/LockLostCommitsNothing with the completion outside the
// transaction (the onward message commits, then the completion finds its
// lease lapsed), Effects/ReRunFindsDeliverySettled with a completion that
// replays inside the transaction.
func TestEffectsControl(t *testing.T) {
	t.Parallel()
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformanceMutant$/^Effects$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the Effects area passed against the mutant %q:\n%s", name, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestConformanceMutant/Effects/"+m.fails+" ") {
				t.Fatalf("Effects/%s did not fail against the mutant %q:\n%s", m.fails, name, out)
			}
		})
	}
}

// TestConformanceMutant runs the kit against the mutant TestEffectsControl
// names; it is skipped otherwise.
func TestConformanceMutant(t *testing.T) {
	t.Parallel()
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("TestEffectsControl runs it against a mutant")
	}
	m, ok := mutants[name]
	if !ok {
		t.Fatalf("no mutant %q", name)
	}
	conformance.Run(t, embedded(viaStoreTx, m.fx))
}
