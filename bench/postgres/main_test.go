package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMain is the consumer process of a latency run when the test binary
// is started again as one (latency runs os.Executable with -consume).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-consume" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs every row for every side at SmokeSizes, one run, on the
// server at DefaultAdminURL (MQLITE_PG_URL when set): it proves the
// benchmark runs, not how fast anything is. No server: the test skips,
// or fails under MQLITE_REQUIRE_SERVICES=1.
func TestSmoke(t *testing.T) {
	admin := DefaultAdminURL
	if u := os.Getenv("MQLITE_PG_URL"); u != "" {
		admin = u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL is required (MQLITE_REQUIRE_SERVICES=1) but unavailable: %v", err)
		}
		t.Skipf("PostgreSQL unavailable: %v", err)
	}
	_ = conn.Close(context.Background())
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"-short", "-url", admin}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, p := range peers() {
		if !strings.Contains(out, p.name) {
			t.Errorf("table lacks side %q:\n%s", p.name, out)
		}
	}
	for _, r := range rows() {
		if !strings.Contains(out, "| "+r.name+" |") {
			t.Errorf("table lacks row %q:\n%s", r.name, out)
		}
	}
}
