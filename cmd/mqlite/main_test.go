package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestRunDispatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"no command", nil, 2, "", "no command given"},
		{"unknown command", []string{"bogus"}, 2, "", `unknown command "bogus" for "mqlite"`},
		{"a misspelt command", []string{"qeues", "list"}, 2, "", "Did you mean this?\n\tqueues"},
		{"a misspelt subcommand", []string{"queues", "lst"}, 2, "", "Did you mean this?\n\tlist"},
		{"a group without its subcommand", []string{"dlq"}, 2, "", "dlq needs a subcommand"},
		{"help", []string{"help"}, 0, "demo ", ""},
		{"-h", []string{"-h"}, 0, "Usage:", ""},
		{"demo -h", []string{"demo", "-h"}, 0, "--db file", ""},
		{"demo with an unknown flag", []string{"demo", "--bogus"}, 2, "", "unknown flag: --bogus"},
		{"demo with an argument", []string{"demo", "extra"}, 2, "", `unknown command "extra" for "mqlite demo"`},
		{"send without a store", []string{"send", "q", "x", "--db", ""}, 2, "", "no store"},
		{"send with too many arguments", []string{"send", "q", "x", "y"}, 2, "", "received 3 (usage: mqlite send QUEUE [BODY]"},
		{"--version", []string{"--version"}, 0, "mqlite ", ""},
		{"completion", []string{"completion", "bash"}, 0, "bash completion", ""},
		{"receive with two settlements", []string{"receive", "q", "--complete", "--abandon", "--db", "x.db"}, 2, "", "exclude each other"},
		{"keys create without a role", []string{"keys", "create", "--db", "x.db"}, 2, "", "needs --role"},
		{"serve without a file", []string{"serve", "--db", ""}, 2, "", "serve needs --db"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			for _, c := range []struct{ name, got, want string }{
				{"stdout", stdout.String(), tc.wantStdout},
				{"stderr", stderr.String(), tc.wantStderr},
			} {
				if c.want == "" && c.got != "" {
					t.Errorf("%s: %q, want nothing", c.name, c.got)
				}
				if !strings.Contains(c.got, c.want) {
					t.Errorf("%s: %q, want it to contain %q", c.name, c.got, c.want)
				}
			}
		})
	}
}

func TestDemoRunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "demo.db")
	runs := []struct {
		want []string
	}{
		{[]string{
			`created queue "orders"`,
			"order 1 (book) with event seq 1",
			"order 3 (tea) with event seq 3",
			"resent the event of order 1: seq 1 came back, nothing was inserted (dedup)",
			"order 4 (piano) and its event rolled back: payment declined",
			"  active  3\n",
			`3    order.placed  {"order_id":3,"item":"tea","total_cents":800}`,
			"orders rows: 3, messages: 3",
			"the rolled-back order 4 left no order row and no message",
			"consuming 3 messages with consumer.Loop",
			"seq 1: shipped order 1 (book)",
			"seq 3: order 3: tea is out of stock: dead-lettered",
			`queue "orders" now: 0 active, 1 dead-lettered`,
		}},
		{[]string{
			`queue "orders" already exists`,
			// The rolled-back id 4 is free again, and no dedup row of its
			// event survived the rollback: order 4 gets a new event.
			"order 4 (book) with event seq 4",
			"order 6 (tea) with event seq 6",
			"resent the event of order 4: seq 4 came back",
			"order 7 (piano) and its event rolled back",
			// The first run shipped its orders and dead-lettered the tea.
			"  active         3\n  dead_lettered  1\n",
			"orders rows: 6, messages: 4",
			"seq 4: shipped order 4 (book)",
			`queue "orders" now: 0 active, 2 dead-lettered`,
		}},
	}
	for i, r := range runs {
		var out bytes.Buffer
		if err := demo(ctx, &out, path); err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, out.String())
		}
		for _, want := range r.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: output lacks %q:\n%s", i+1, want, out.String())
			}
		}
	}

	// The file holds what the demo said, and the store is closed (Open works).
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = 'orders' AND state <> 'completed'`); n != 2 {
		t.Errorf("%d messages, want the 2 dead-lettered tea orders", n)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM orders`); n != 6 {
		t.Errorf("%d orders, want 6", n)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM orders o JOIN mqlite_messages m ON m.message_id = 'order-' || o.id
		WHERE o.item = 'tea' AND m.state = 'dead_lettered'`); n != 2 {
		t.Errorf("%d tea orders with their dead-lettered event, want 2", n)
	}
}

// TestDemoCommandIsRepeatable runs "mqlite demo" twice without --db in a
// temporary working folder: both runs print the same and leave no file
// behind; t.Chdir rules out t.Parallel.
func TestDemoCommandIsRepeatable(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var outs []string
	for range 2 {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"demo", "--db", ""}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("exit code %d: %s", code, stderr.String())
		}
		// The file's name is in the first line; the rest must match.
		out := stdout.String()
		outs = append(outs, out[strings.Index(out, "\n"):])
		if !strings.Contains(out, `created queue "orders"`) || !strings.Contains(out, "orders rows: 3, messages: 3") {
			t.Fatalf("output: %s", out)
		}
	}
	if outs[0] != outs[1] {
		t.Errorf("the second run printed otherwise:\n%s\n---\n%s", outs[0], outs[1])
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the demo left %v in the working folder", left)
	}
}

// TestEveryCommandHasAnExample: each command's --help shows an example.
func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() != "help" && c.Example == "" {
			t.Errorf("%s has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&globals{stdout: io.Discard, stderr: io.Discard}))
}
