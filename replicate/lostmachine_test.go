package replicate_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/litestream/file"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/replicate"
)

// The lost-machine test: a primary process (this test binary, re-executed
// as TestLostMachinePrimary) commits business rows with their messages,
// every tenth of its first 1,000 sends waiting for replication, while a relay gated by the
// replicator forwards the messages; the harness follows the replica with a
// standby, SIGKILLs the primary, deletes its file and promotes the standby.

const (
	envPrimary      = "MQLITE_LOST_PRIMARY" // "<primary dir>|<replica dir>"; set only in the primary
	lostSyncEvery   = 500 * time.Millisecond
	lostWaitedSends = 100  // the primary waits for every tenth of its first 1,000 sends
	lostTail        = 1000 // then the harness kills it after this many unwaited sends
)

// TestLostMachinePrimary is the primary process; it does nothing unless
// the harness started it. It runs until it is killed, and prints one line
// per event on stdout, in order:
//
//	W <id>            a waited send: committed and replicated
//	U <id> <unixns>   an unwaited send: committed (at that time)
//	F <id>            the gated relay forwarded <id>
func TestLostMachinePrimary(t *testing.T) {
	dirs := os.Getenv(envPrimary)
	if dirs == "" {
		t.Skip("runs only as the lost-machine harness's primary process")
	}
	primary, replica, _ := strings.Cut(dirs, "|")
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(primary, "app.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := replicate.Start(ctx, st, replicate.Config{
		Client: file.NewReplicaClient(replica), SyncInterval: lostSyncEvery, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	r, err := relay.New(st, "events", sinkFunc(func(_ context.Context, msgs []mqlite.Message) []relay.Outcome {
		for _, m := range msgs {
			say("F %s", m.MessageID)
		}
		return make([]relay.Outcome, len(msgs))
	}), relay.Config{Gate: rep, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }()
	for i := 0; ; i++ {
		id := fmt.Sprintf("m-%d", i)
		send := func(tx *mqlite.Tx) error {
			if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
				return err
			}
			_, err := outbox.SendOne(tx.Context(), tx.SQL(), "events", outbox.Message{Body: []byte(id), MessageID: id})
			return err
		}
		if i%10 == 0 && i < 10*lostWaitedSends {
			if err := rep.Tx(ctx, st, send); err != nil {
				t.Fatal(err)
			}
			say("W %s", id)
			continue
		}
		if err := st.Tx(ctx, send); err != nil {
			t.Fatal(err)
		}
		say("U %s %d", id, time.Now().UnixNano())
	}
}

// sinkFunc is a relay.Sink from a function.
type sinkFunc func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome

func (f sinkFunc) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	return f(ctx, msgs)
}

func TestLostMachine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := t.TempDir(), t.TempDir()
	standbyPath := filepath.Join(t.TempDir(), "standby.db")

	cmd := exec.Command(os.Args[0], "-test.run=^TestLostMachinePrimary$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPrimary+"="+primary+"|"+replica)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	type unwaited struct {
		id   string
		line int
		at   time.Time
	}
	var (
		mu        sync.Mutex
		waited    []string
		lastW     int // line number of the last waited send
		unwaiteds []unwaited
		forwarded = map[string]bool{}
	)
	progress := make(chan int, 1) // waited sends so far, plus unwaited ones after the last of them
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for line := 0; sc.Scan(); line++ {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue // the test binary's own output
			}
			mu.Lock()
			switch f[0] {
			case "W":
				waited, lastW = append(waited, f[1]), line
				select {
				case <-progress:
				default:
				}
				progress <- len(waited)
			case "U":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				unwaiteds = append(unwaiteds, unwaited{f[1], line, time.Unix(0, ns)})
				if len(waited) == lostWaitedSends {
					select {
					case <-progress:
					default:
					}
					progress <- len(waited) + len(unwaiteds) - (lostWaitedSends*10 - lostWaitedSends)
				}
			case "F":
				forwarded[f[1]] = true
			}
			mu.Unlock()
		}
	}()
	waitWaited := func(n int) { // waits for the progress count n
		t.Helper()
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case got := <-progress:
				if got >= n {
					return
				}
			case <-timeout:
				t.Fatalf("timed out waiting for %d waited sends", n)
			}
		}
	}

	waitWaited(1)
	sb, err := replicate.StartStandby(ctx, standbyPath, replicate.StandbyConfig{
		Client: file.NewReplicaClient(replica), FollowInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	waitWaited(lostWaitedSends + lostTail)

	// The machine is lost: the primary dies with its file.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	<-readDone
	if err := os.RemoveAll(primary); err != nil {
		t.Fatal(err)
	}

	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sb.Promote(pctx); err != nil {
		t.Fatal(err)
	}
	st, err := mqlite.Open(ctx, standbyPath, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	have := map[string]bool{}
	rows, err := st.DB().QueryContext(ctx, `SELECT id FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, id := range waited {
		if !have[id] {
			t.Errorf("waited send %s is missing on the standby", id)
		}
	}
	for id := range forwarded {
		if !have[id] {
			t.Errorf("the gated relay forwarded %s, whose order is missing on the standby", id)
		}
	}
	// The loss window: an unwaited send committed before the last waited
	// send's wait began is replicated by it; only later ones may be lost.
	lost, first := 0, time.Time{}
	for _, u := range unwaiteds {
		if have[u.id] {
			continue
		}
		if u.line < lastW {
			t.Errorf("unwaited send %s, committed before the last waited send returned, is missing", u.id)
		}
		if lost == 0 {
			first = u.at
		}
		lost++
	}
	if len(forwarded) == 0 {
		t.Error("the gated relay forwarded nothing")
	}
	window := time.Duration(0)
	if lost > 0 {
		window = killed.Sub(first)
	}
	t.Logf("%d waited sends, all on the standby; %d forwarded by the gated relay, all on the standby; %d unwaited sends, %d lost: the lost tail began %v before the kill (SyncInterval %v)",
		len(waited), len(forwarded), len(unwaiteds), lost, window.Round(time.Millisecond), lostSyncEvery)
}
