package client_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/conformance"
	"github.com/mqlite/mqlite/outbox"
)

// mutantEnv names the mutant TestConformanceMutant runs the Effects area
// against; TestEffectsControl sets it in a child process.
const mutantEnv = "MQLITE_EFFECTS_MUTANT"

// mutants are broken ways to commit the Effects area's transactions over
// the client, each of which the kit must catch.
var mutants = map[string]func(c *client.Client) effects{
	// The completion moved out of the commit: the batch commits the sends,
	// then Client.Complete settles on its own, as an ack after a publish.
	"completion-outside": func(c *client.Client) effects {
		return func() (func(context.Context, func(conformance.EffectsOps) error) error, func(context.Context) error) {
			return func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
				b := new(client.Batch)
				var later []mqlite.Lock
				ops := stage(ctx, b)
				ops.Complete = func(l mqlite.Lock) error { later = append(later, l); return nil }
				if err := fn(ops); err != nil {
					return err
				}
				if _, err := c.Commit(ctx, b); err != nil {
					return err
				}
				for _, l := range later {
					if err := c.Complete(ctx, l); err != nil {
						return err
					}
				}
				return nil
			}, nil
		}
	},
	// A retry that runs the transaction again with the plain calls
	// (Client.Send, Client.Complete) instead of committing the same batch
	// again: the plain completion answers from its receipt, the send lands
	// twice. (A retry that stages the transaction again in a new batch is
	// no longer a mutant: a batch that settles takes the key its locks
	// derive, so it replays as the same batch does.)
	"retry-outside-commit": func(c *client.Client) effects {
		return func() (func(context.Context, func(conformance.EffectsOps) error) error, func(context.Context) error) {
			var last func(conformance.EffectsOps) error
			tx := func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
				b := new(client.Batch)
				if err := fn(stage(ctx, b)); err != nil {
					return err
				}
				_, err := c.Commit(ctx, b)
				last = fn
				return err
			}
			retry := func(ctx context.Context) error {
				return last(conformance.EffectsOps{
					Send: func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
						out := make([]outbox.Result, len(msgs))
						for i, m := range msgs {
							r, err := c.Send(ctx, queue, m)
							if err != nil {
								return nil, err
							}
							out[i] = r
						}
						return out, nil
					},
					Complete: func(l mqlite.Lock) error { return c.Complete(ctx, l) },
					Reject:   func(l mqlite.Lock, reason, description string) error { return c.Reject(ctx, l, reason, description) },
				})
			}
			return tx, retry
		}
	},
}

// TestEffectsControl shows that the Effects area over the client can fail:
// it runs the area in a child process against each mutant and wants the
// named subtests to fail there.
func TestEffectsControl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mutant string
		fails  []string
	}{
		{"completion-outside", []string{"LockLostCommitsNothing"}},
		{"retry-outside-commit", []string{"RetryAfterLostReplyCommitsNothing"}},
	}
	for _, tc := range tests {
		t.Run(tc.mutant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformanceMutant$/^Effects$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+tc.mutant)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the Effects area passed against %s:\n%s", tc.mutant, out)
			}
			for _, name := range tc.fails {
				if !strings.Contains(string(out), "--- FAIL: TestConformanceMutant/Effects/"+name+" ") {
					t.Errorf("Effects/%s did not fail against %s:\n%s", name, tc.mutant, out)
				}
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
	conformance.Run(t, clientHarness(mutants[name]))
}
