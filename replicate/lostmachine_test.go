package replicate_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
// every tenth of its first 1,000 sends waiting for replication, then an
// unwaited tail; the harness follows the replica with a standby, SIGKILLs
// the primary, deletes its file and promotes the standby. Two cases:
//
//   - waited: no shipment but the waits' own (SyncInterval an hour, no
//     relay), so what a wait carries is told apart from what it does not:
//     every waited send survives, and the whole tail after the last wait
//     is lost (the control: without the waits, the waited sends are lost
//     too);
//   - window: SyncInterval 500ms and a relay gated by the replicator, a
//     tail that spans at least three shipments: every forwarded message
//     survives, and no send is lost that was committed before the last
//     completed shipment began (the loss window, RPO).

const (
	envPrimary      = "MQLITE_LOST_PRIMARY" // "<primary dir>|<replica dir>|<case>"; set only in the primary
	lostSyncEvery   = 500 * time.Millisecond
	lostWaitedSends = 100  // the primary waits for every tenth of its first 1,000 sends
	lostTail        = 1000 // then the harness kills it after this many unwaited sends (waited)
	lostWindowTail  = 200  // or after this many (window),
	lostTailShips   = 3    // and this many shipments after the last waited send
	caseWaited      = "waited"
	caseWindow      = "window"
)

// TestLostMachinePrimary is the primary process; it does nothing unless
// the harness started it. It runs until it is killed, and prints one line
// per event on stdout, in order:
//
//	W <id>            a waited send: committed and replicated
//	U <id> <unixns>   an unwaited send: committed (at that time)
//	F <id>            the gated relay forwarded <id> (window)
//	S <unixns>        a shipment completed (at that time) (window)
func TestLostMachinePrimary(t *testing.T) {
	dirs := strings.Split(os.Getenv(envPrimary), "|")
	if len(dirs) != 3 {
		t.Skip("runs only as the lost-machine harness's primary process")
	}
	primary, replica, lostCase := dirs[0], dirs[1], dirs[2]
	syncEvery := lostSyncEvery
	if lostCase == caseWaited {
		syncEvery = time.Hour // only the waits ship
	}
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
		Client: file.NewReplicaClient(replica), SyncInterval: syncEvery, Logger: slog.New(slog.DiscardHandler),
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
	if lostCase == caseWindow {
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
		go reportShipments(rep, say) // until the kill
	}
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

// reportShipments says "S <unixns>" for each completed shipment it sees;
// it looks every 10ms, so it may miss one, which only loosens the bound
// the harness draws from them.
func reportShipments(rep *replicate.Replicator, say func(format string, args ...any)) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last time.Time
	for range tick.C {
		if ok := rep.Stats().LastOK; ok.After(last) {
			last = ok
			say("S %d", ok.UnixNano())
		}
	}
}

// sinkFunc is a relay.Sink from a function.
type sinkFunc func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome

func (f sinkFunc) Send(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
	return f(ctx, msgs)
}

func TestLostMachine(t *testing.T) {
	t.Parallel()
	for _, c := range []string{caseWaited, caseWindow} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			testLostMachine(t, c)
		})
	}
}

// lostRun is what the harness read from the primary before the kill.
type lostRun struct {
	mu        sync.Mutex
	waited    []string
	lastW     int // line number of the last waited send
	unwaiteds []unwaited
	ships     []time.Time // completed shipments (window)
	shipsLate int         // of them after the last waited send
	forwarded map[string]bool
}

// unwaited is an unwaited send: its line and its commit time.
type unwaited struct {
	id   string
	line int
	at   time.Time
}

// tail is how many unwaited sends came after the last waited one.
func (r *lostRun) tail() int {
	n := 0
	for _, u := range r.unwaiteds {
		if u.line > r.lastW {
			n++
		}
	}
	return n
}

// read reads the primary's lines until its end, signals each on lines,
// and closes due when the kill is due: every waited send done, then
// lostTail unwaited sends (waited) or lostWindowTail unwaited sends and
// lostTailShips shipments (window) after the last of them.
func (r *lostRun) read(stdout io.Reader, lostCase string, lines, firstWait, due chan<- struct{}) {
	sc := bufio.NewScanner(stdout)
	said := false
	for line := 0; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue // the test binary's own output
		}
		select {
		case lines <- struct{}{}:
		default:
		}
		r.mu.Lock()
		switch f[0] {
		case "W":
			r.waited, r.lastW, r.shipsLate = append(r.waited, f[1]), line, 0
			if len(r.waited) == 1 {
				close(firstWait)
			}
		case "U":
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			r.unwaiteds = append(r.unwaiteds, unwaited{f[1], line, time.Unix(0, ns)})
		case "F":
			r.forwarded[f[1]] = true
		case "S":
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			r.ships = append(r.ships, time.Unix(0, ns))
			r.shipsLate++
		}
		if !said && len(r.waited) == lostWaitedSends &&
			(lostCase == caseWaited && r.tail() >= lostTail ||
				lostCase == caseWindow && r.tail() >= lostWindowTail && r.shipsLate >= lostTailShips) {
			said = true
			close(due)
		}
		r.mu.Unlock()
	}
}

func testLostMachine(t *testing.T, lostCase string) {
	ctx := context.Background()
	primary, replica := t.TempDir(), t.TempDir()
	standbyPath := filepath.Join(t.TempDir(), "standby.db")

	cmd := exec.Command(os.Args[0], "-test.run=^TestLostMachinePrimary$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPrimary+"="+primary+"|"+replica+"|"+lostCase)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	run := &lostRun{forwarded: map[string]bool{}}
	firstWait, due, readDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	lines := make(chan struct{}, 1)
	go func() {
		defer close(readDone)
		run.read(stdout, lostCase, lines, firstWait, due)
	}()
	await := func(ch <-chan struct{}, what string) { // fails on a primary silent for 2 minutes
		t.Helper()
		silent := time.NewTimer(2 * time.Minute)
		defer silent.Stop()
		for {
			select {
			case <-ch:
				return
			case <-readDone:
				t.Fatalf("the primary ended before %s", what)
			case <-lines:
				silent.Reset(2 * time.Minute)
			case <-silent.C:
				run.mu.Lock()
				defer run.mu.Unlock()
				t.Fatalf("the primary was silent for 2 minutes before %s: %d waited sends, %d unwaited after the last, %d shipments after it",
					what, len(run.waited), run.tail(), run.shipsLate)
			}
		}
	}

	await(firstWait, "its first waited send")
	sb, err := replicate.StartStandby(ctx, standbyPath, replicate.StandbyConfig{
		Client: file.NewReplicaClient(replica), FollowInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	await(due, "the unwaited tail")

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
	have := standbyOrders(t, standbyPath)
	checkLostMachine(t, lostCase, run, have, killed)
}

// standbyOrders opens the promoted standby's file and returns its orders.
func standbyOrders(t *testing.T, path string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	have := map[string]bool{}
	rows, err := st.DB().QueryContext(ctx, `SELECT id FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
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
	return have
}

// checkLostMachine holds what survived on the standby (have) to what the
// primary said before the kill.
func checkLostMachine(t *testing.T, lostCase string, run *lostRun, have map[string]bool, killed time.Time) {
	t.Helper()
	run.mu.Lock()
	defer run.mu.Unlock()
	for _, id := range run.waited {
		if !have[id] {
			t.Errorf("waited send %s is missing on the standby", id)
		}
	}
	for id := range run.forwarded {
		if !have[id] {
			t.Errorf("the gated relay forwarded %s, whose order is missing on the standby", id)
		}
	}
	// What no shipment that completed can have carried: sends after the
	// start of the last completed shipment, which began after the one
	// before it ended. The waited case has no shipment after its last wait.
	carried := time.Time{}
	if n := len(run.ships); n >= 2 {
		carried = run.ships[n-2]
	}
	lost, lostTail, first := 0, 0, time.Time{}
	for _, u := range run.unwaiteds {
		if have[u.id] {
			continue
		}
		switch {
		case u.line < run.lastW:
			t.Errorf("unwaited send %s, committed before the last waited send returned, is missing", u.id)
		case u.at.Before(carried):
			t.Errorf("unwaited send %s, committed %v before the kill and before the last completed shipment began, is missing (RPO)",
				u.id, killed.Sub(u.at).Round(time.Millisecond))
		}
		if lost == 0 {
			first = u.at
		}
		lost++
		if u.line > run.lastW {
			lostTail++
		}
	}
	tail := run.tail()
	window := time.Duration(0)
	if lost > 0 {
		window = killed.Sub(first)
	}
	switch lostCase {
	case caseWaited:
		// The control: nothing shipped the tail, so all of it is lost; a
		// send that survives here survives without a wait.
		if lostTail != tail {
			t.Errorf("%d of the %d unwaited sends after the last wait survived with no shipment to carry them", tail-lostTail, tail)
		}
		t.Logf("%d waited sends, all on the standby; %d unwaited sends after the last wait, all %d lost", len(run.waited), tail, lostTail)
	case caseWindow:
		if len(run.forwarded) == 0 {
			t.Error("the gated relay forwarded nothing")
		}
		if len(run.ships) < 2 {
			t.Errorf("%d shipments seen: no loss window to check", len(run.ships))
		}
		t.Logf("%d waited sends, all on the standby; %d forwarded by the gated relay, all on the standby; %d unwaited sends (%d after the last wait), %d lost: the lost tail began %v before the kill, the last completed shipment began at most %v before it (SyncInterval %v, %d shipments seen)",
			len(run.waited), len(run.forwarded), len(run.unwaiteds), tail, lost, window.Round(time.Millisecond),
			killed.Sub(carried).Round(time.Millisecond), lostSyncEvery, len(run.ships))
	}
}
