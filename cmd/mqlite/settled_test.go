package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIShowsNoCompletedMessage: the CLI's reads (stats, peek, find by
// MessageID and by state) show none of the messages receive --complete
// settled, which the store keeps as the receipts of their completions,
// beside the one message left.
func TestCLIShowsNoCompletedMessage(t *testing.T) {
	t.Parallel()
	env := []string{"MQLITE_DB=" + filepath.Join(t.TempDir(), "mq.db"), "MQLITE_URL="}
	mustCLI(t, env, "", "queues", "create", "jobs")
	mustCLI(t, env, "", "send", "jobs", "done-1", "--message-id", "done-1")
	mustCLI(t, env, "", "send", "jobs", "done-2", "--message-id", "done-2")
	mustCLI(t, env, "", "send", "jobs", "left", "--message-id", "left")
	if out := mustCLI(t, env, "", "receive", "jobs", "--max", "2", "--complete"); !strings.Contains(out, "completed 2") {
		t.Fatalf("receive --complete: %q", out)
	}
	var st struct{ Active, Scheduled, Locked, Deferred, DeadLettered int64 }
	out := mustCLI(t, env, "", "stats", "jobs", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st != (struct{ Active, Scheduled, Locked, Deferred, DeadLettered int64 }{Active: 1}) {
		t.Fatalf("stats: %q (%v), want the one message left", out, err)
	}
	for _, args := range [][]string{
		{"peek", "jobs"},
		{"find", "jobs"},
		{"find", "jobs", "--message-id", "done-1"},
		{"find", "jobs", "--state", "active"},
		{"stats"},
	} {
		out := mustCLI(t, env, "", args...)
		if strings.Contains(out, "done-") {
			t.Errorf("mqlite %s shows a completed message: %q", strings.Join(args, " "), out)
		}
	}
	if out := mustCLI(t, env, "", "peek", "jobs"); !strings.Contains(out, "left") {
		t.Errorf("peek: %q, want the message left", out)
	}
}
