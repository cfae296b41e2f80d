package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mqlite/mqlite"
)

// TestInboundSenders: --inbound names a sender and its queue; its secrets
// come from its --inbound-secret-file or else its environment variable,
// never the command line; a sender without secrets, a file without its
// sender and a malformed NAME=VALUE are usage errors.
func TestInboundSenders(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(file, []byte("whsec_old\n\nwhsec_new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MQLITE_INBOUND_SECRET_STRIPE_LIVE": "whsec_env1 whsec_env2"}
	for _, tc := range []struct {
		name        string
		args        []string
		wantSecrets [][]string // per source; nil: a usage error
	}{
		{"none", nil, [][]string{}},
		{"from a file", []string{"--inbound", "pay=payments", "--inbound-secret-file", "pay=" + file}, [][]string{{"whsec_old", "whsec_new"}}},
		{"from the environment", []string{"--inbound", "stripe-live=payments"}, [][]string{{"whsec_env1", "whsec_env2"}}},
		{"both", []string{"--inbound", "stripe-live=payments", "--inbound", "pay=payments", "--inbound-secret-file", "pay=" + file},
			[][]string{{"whsec_env1", "whsec_env2"}, {"whsec_old", "whsec_new"}}},
		{"no secret anywhere", []string{"--inbound", "pay=payments"}, nil},
		{"a file without its source", []string{"--inbound", "stripe-live=payments", "--inbound-secret-file", "pay=" + file}, nil},
		{"a missing file", []string{"--inbound", "pay=payments", "--inbound-secret-file", "pay=" + file + ".none"}, nil},
		{"no queue", []string{"--inbound", "pay"}, nil},
		{"no file", []string{"--inbound", "pay=payments", "--inbound-secret-file", "pay="}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var f inboundFlags
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			f.add(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.resolve(func(k string) string { return env[k] })
			if tc.wantSecrets == nil {
				var ue usageError
				if !errors.As(err, &ue) {
					t.Fatalf("err %v, want a usage error", err)
				}
				return
			}
			if err != nil || len(got) != len(tc.wantSecrets) {
				t.Fatalf("%+v, %v", got, err)
			}
			for i, s := range got {
				if !slices.Equal(s.Secrets, tc.wantSecrets[i]) || s.Queue != "payments" || s.Tolerance != f.tolerance {
					t.Errorf("source %d: %+v, want secrets %q", i, s, tc.wantSecrets[i])
				}
			}
		})
	}
}

// TestServeInboundNeedsItsQueue: serve refuses an inbound sender whose
// queue does not exist (or has no dedup window), before it serves.
func TestServeInboundNeedsItsQueue(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, served, stdout, stderr := serveUntilServing(t, "--addr", "127.0.0.1:0", "--inbound", "pay=payments", "--inbound-secret-file", "pay="+file)
	if code != 2 || served || !strings.Contains(stderr, `queue "payments"`) {
		t.Fatalf("exit %d, served %v\nstdout: %s\nstderr: %s", code, served, stdout, stderr)
	}
}

// TestServeInboundRetryHorizon: serve --inbound without
// --inbound-retry-horizon takes the providers' days (3) as the horizon:
// a queue with the default 10-minute window is refused before serving,
// with the command that fixes it; a horizon given that the window covers
// serves.
func TestServeInboundRetryHorizon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "in.db")
	st, err := mqlite.Open(context.Background(), db, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(context.Background(), "payments", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	args := []string{"--db", db, "--addr", "127.0.0.1:0", "--inbound", "pay=payments", "--inbound-secret-file", "pay=" + file}
	code, served, stdout, stderr := serveUntilServing(t, args...)
	if code != 2 || served || !strings.Contains(stderr, "--dedup-window 72h") || strings.Count(stderr, "invalid config") != 1 {
		t.Fatalf("no horizon over a 10m window: exit %d, served %v\nstdout: %s\nstderr: %s", code, served, stdout, stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(stderr))
	code, served, stdout, stderr = serveUntilServing(t, append(args, "--inbound-retry-horizon", "5m")...)
	if !served {
		t.Fatalf("a 5m horizon over a 10m window: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}
