package pgmulti_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the harness's look at pg_stat_activity

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// workers is how many processes share the database in each promise.
const workers = 3

// TestMultiProcess checks the kit's promises across three processes whose
// stores are open on one PostgreSQL database at once, consuming it
// directly. Wake measures latencies, and runs alone; the others run at
// once.
func TestMultiProcess(t *testing.T) {
	t.Run("Wake", func(t *testing.T) { testWake(t, pgtest.URL(t)) })
	for _, c := range []struct {
		name string
		run  func(t *testing.T, url string)
	}{
		{"Order", testOrder},
		{"Groups", testGroups},
		{"GroupsControl", testGroupsControl},
		{"Fencing", testFencing},
		{"Dedup", testDedup},
		{"Schedules", testSchedules},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, pgtest.URL(t))
		})
	}
}

// handling is one handling a consume worker reported.
type handling struct {
	proc       int
	label      string
	seq        int64
	start, end int64 // wall-clock nanoseconds
}

// startN starts n workers of role with args, all at once, and waits
// until each is ready.
func startN(t *testing.T, n int, role, url string, args ...string) []*proc {
	t.Helper()
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = launch(t, fmt.Sprintf("%s worker %d", role, i), role, url, args...)
	}
	for _, p := range ps {
		p.expect(t, "ready")
	}
	return ps
}

// drain reads the handlings of the consume workers ps until want of them
// came, then stops the workers and reads what they said until they exit:
// a handling said twice is kept twice.
func drain(t *testing.T, ps []*proc, want int) []handling {
	t.Helper()
	type line struct {
		proc int
		text string
	}
	merged := make(chan line)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range p.lines {
				merged <- line{i, l}
			}
		}()
	}
	go func() { wg.Wait(); close(merged) }()
	var hs []handling
	stopped := false
	timeout := time.After(2 * lineTimeout)
	for {
		if !stopped && len(hs) >= want {
			stopped = true
			for _, p := range ps {
				_ = p.stdin.Close()
			}
		}
		select {
		case l, ok := <-merged:
			if !ok {
				for _, p := range ps {
					if err := p.cmd.Wait(); err != nil {
						p.failed(t, err)
					}
				}
				if len(hs) < want {
					t.Fatalf("the workers ended after %d handlings, want %d", len(hs), want)
				}
				return hs
			}
			f := strings.Fields(l.text)
			if len(f) != 5 || f[0] != "h" {
				t.Fatalf("%s said %q", ps[l.proc].name, l.text)
			}
			h := handling{proc: l.proc, label: f[1]}
			h.seq, _ = strconv.ParseInt(f[2], 10, 64)
			h.start, _ = strconv.ParseInt(f[3], 10, 64)
			h.end, _ = strconv.ParseInt(f[4], 10, 64)
			hs = append(hs, h)
		case <-timeout:
			t.Fatalf("%d handlings of %d in %v", len(hs), want, 2*lineTimeout)
		}
	}
}

// perProc counts the handlings of each worker.
func perProc(hs []handling) []int {
	n := make([]int, workers)
	for _, h := range hs {
		n[h.proc]++
	}
	return n
}

// checkSerial returns what breaks the promise of one label's handlings:
// hs, sorted by start, must be the handlings of want (the label's seqs in
// the order they were sent), each once, and each must start after the one
// before it ended: no two in flight at once, across the processes.
func checkSerial(label string, hs []handling, want []int64) []string {
	sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
	var bad []string
	got := make([]int64, len(hs))
	for i, h := range hs {
		got[i] = h.seq
		if i > 0 && h.start <= hs[i-1].end {
			bad = append(bad, fmt.Sprintf("%s: seq %d (worker %d) started %v before seq %d (worker %d) ended",
				label, h.seq, h.proc, time.Duration(hs[i-1].end-h.start), hs[i-1].seq, hs[i-1].proc))
		}
	}
	if !slices.Equal(got, want) {
		bad = append(bad, fmt.Sprintf("%s: handled in the order %v, sent in the order %v", label, head(got), head(want)))
	}
	return bad
}

// head is the first few of seqs, for a message.
func head(seqs []int64) []int64 { return seqs[:min(len(seqs), 12)] }

// sendLabelled sends n messages per label, the labels interleaved, in
// transactions of 20, with GroupID the label when grouped; it returns
// each label's seqs in the order sent.
func sendLabelled(t *testing.T, st *mqlite.Store, queue string, labels []string, n int, grouped bool) map[string][]int64 {
	t.Helper()
	sent := map[string][]int64{}
	var msgs []outbox.Message
	flush := func() {
		res, err := outbox.Send(context.Background(), st, queue, msgs...)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		for i, r := range res {
			label, _, _ := strings.Cut(string(msgs[i].Body), " ")
			sent[label] = append(sent[label], r.Seq)
		}
		msgs = msgs[:0]
	}
	for i := range n {
		for _, l := range labels {
			m := outbox.Message{Body: fmt.Appendf(nil, "%s %d", l, i)}
			if grouped {
				m.GroupID = l
			}
			if msgs = append(msgs, m); len(msgs) == 20 {
				flush()
			}
		}
	}
	if len(msgs) > 0 {
		flush()
	}
	return sent
}

// testOrder: a FIFO queue that one producer fills while three processes
// consume it drains in the producer's order, one message in flight at a
// time across the three.
func testOrder(t *testing.T, url string) {
	st := openHarness(t, url)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "fifo", mqlite.QueueOptions{Ordering: mqlite.FIFO}); err != nil {
		t.Fatal(err)
	}
	ps := startN(t, workers, roleConsume, url, "fifo", "3", "500")
	const n = 240
	sent := sendLabelled(t, st, "fifo", []string{"F"}, n, false)
	hs := drain(t, ps, n)
	if bad := checkSerial("fifo", hs, sent["F"]); len(bad) > 0 {
		t.Fatalf("%d breaks of FIFO order across the processes, first: %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "; "))
	}
	t.Logf("a FIFO queue of %d messages drained in order, one in flight at a time, by three processes (handled %v)", n, perProc(hs))
	if busy := slices.DeleteFunc(perProc(hs), func(n int) bool { return n == 0 }); len(busy) < 2 {
		t.Fatalf("only %d process took part (%v): nothing was checked across processes", len(busy), perProc(hs))
	}
}

// groupLabels are the groups of testGroups.
var groupLabels = []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}

// groupRun sends 30 messages per label of groupLabels (grouped or not),
// drains them with three processes and returns the breaks of the group
// promise: per label, one handling at a time and the sending order.
func groupRun(t *testing.T, url string, grouped bool) (bad []string, hs []handling) {
	t.Helper()
	st := openHarness(t, url)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "groups", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	ps := startN(t, workers, roleConsume, url, "groups", "4", "2000")
	const n = 30
	sent := sendLabelled(t, st, "groups", groupLabels, n, grouped)
	hs = drain(t, ps, n*len(groupLabels))
	byLabel := map[string][]handling{}
	for _, h := range hs {
		byLabel[h.label] = append(byLabel[h.label], h)
	}
	for _, l := range groupLabels {
		bad = append(bad, checkSerial(l, byLabel[l], sent[l])...)
	}
	return bad, hs
}

// testGroups: with eight groups interleaved in one queue, no two messages
// of a group are in flight at once across the three processes, and each
// group is handled in the order it was sent.
func testGroups(t *testing.T, url string) {
	bad, hs := groupRun(t, url, true)
	if len(bad) > 0 {
		t.Fatalf("%d breaks of the group promise across the processes, first: %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "; "))
	}
	t.Logf("%d groups of 30 messages: one in flight per group across three processes, each group in order (handled %v)", len(groupLabels), perProc(hs))
}

// testGroupsControl shows the group check can fail: the same messages
// sent without their GroupID are handled at once by the three processes,
// and the check finds handlings of one label that overlap or come out of
// order.
func testGroupsControl(t *testing.T, url string) {
	bad, hs := groupRun(t, url, false)
	t.Logf("control, the labels sent without GroupID: the check found %d breaks (handled %v)", len(bad), perProc(hs))
	if len(bad) == 0 {
		t.Fatal("without groups the check found no overlap and no disorder: it cannot fail")
	}
}

// testFencing: a lease that lapsed and was taken by another process
// fences off the first holder: A's lease lapses and B claims the message,
// B's lapses and C claims it; A's and B's Complete then get ErrLockLost,
// and C's completes it.
func testFencing(t *testing.T, url string) {
	st := openHarness(t, url)
	ctx := context.Background()
	lease := time.Second // long enough for the three Completes after the last claim, on a loaded machine
	if err := st.CreateQueue(ctx, "fence", mqlite.QueueOptions{LockDuration: lease}); err != nil {
		t.Fatal(err)
	}
	seqs, err := outbox.Send(ctx, st, "fence", outbox.Message{Body: []byte("fenced")})
	if err != nil {
		t.Fatal(err)
	}
	ps := startN(t, workers, roleFence, url, "fence")
	for i, p := range ps {
		// Each claim waits in Receive until the lease before it lapses.
		p.tell(t, "claim")
		got := p.expect(t, "claimed")
		if got[0] != strconv.FormatInt(seqs[0].Seq, 10) || got[1] != strconv.Itoa(i+1) {
			t.Fatalf("%s claimed seq %s on delivery %s, want seq %d on delivery %d", p.name, got[0], got[1], seqs[0].Seq, i+1)
		}
	}
	for i, p := range ps {
		want := "lost"
		if i == len(ps)-1 {
			want = "ok"
		}
		p.tell(t, "complete")
		if got := strings.Join(p.expect(t, "complete"), " "); got != want {
			t.Fatalf("%s's Complete: %s, want %s", p.name, got, want)
		}
	}
	for _, p := range ps {
		p.finish(t)
	}
	stats, err := st.Stats(ctx, "fence")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Total() != 0 {
		t.Fatalf("the fenced message is still there: %+v", stats)
	}
	t.Logf("one message claimed by three processes in turn, each after the lease before lapsed: the first two Completes got ErrLockLost, the third completed it")
}

// testDedup: three processes send the same 150 MessageIDs at once, each
// in its own order and batches: each id has one seq, the same for all
// three, exactly one of the three sends inserted it, and the queue holds
// 150 messages.
func testDedup(t *testing.T, url string) {
	st := openHarness(t, url)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "dedup", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 150
	ps := make([]*proc, workers)
	for i := range ps {
		ps[i] = launch(t, fmt.Sprintf("dedup worker %d", i), roleDedup, url, "dedup", strconv.Itoa(n), strconv.Itoa(i+1))
	}
	for _, p := range ps {
		p.expect(t, "ready")
	}
	for _, p := range ps {
		p.tell(t, "go")
	}
	seqOf := map[string]map[string]bool{} // id → the seqs reported
	inserted := map[string]int{}          // id → sends that were not duplicates
	for _, p := range ps {
		for {
			f := strings.Fields(p.next(t))
			if len(f) == 1 && f[0] == "done" {
				break
			}
			if len(f) != 4 || f[0] != "sent" {
				t.Fatalf("%s said %q", p.name, f)
			}
			if seqOf[f[1]] == nil {
				seqOf[f[1]] = map[string]bool{}
			}
			seqOf[f[1]][f[2]] = true
			if f[3] == "false" {
				inserted[f[1]]++
			}
		}
		p.finish(t)
	}
	for i := range n {
		id := dedupID(i)
		if len(seqOf[id]) != 1 || inserted[id] != 1 {
			t.Errorf("MessageID %s: seqs %v, inserted by %d of the three sends", id, seqOf[id], inserted[id])
		}
	}
	stats, err := st.Stats(ctx, "dedup")
	if err != nil {
		t.Fatal(err)
	}
	if stats.Active != n || stats.Total() != n {
		t.Fatalf("the queue holds %+v, want %d active", stats, n)
	}
	t.Logf("three processes sent the same %d MessageIDs at once: one seq each, %d messages in the queue", n, stats.Total())
}

// testSchedules: three processes run the schedule loop on one schedule
// every second for four periods: each period sends exactly one message
// (dedup off on the target, so a second firing would show as a second
// message), and no period is skipped.
func testSchedules(t *testing.T, url string) {
	st := openHarness(t, url)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "ticks", mqlite.QueueOptions{DedupWindow: -1}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "ticks", Every: mqlite.MinScheduleEvery}); err != nil {
		t.Fatal(err)
	}
	ps := startN(t, workers, roleSchedule, url)
	const periods = 4
	deadline := time.Now().Add(time.Duration(periods+20) * mqlite.MinScheduleEvery)
	for {
		info, err := st.GetSchedule(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		if info.Fired >= periods {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d periods fired by three processes in %v, want %d", info.Fired, time.Duration(periods+20)*mqlite.MinScheduleEvery, periods)
		}
		time.Sleep(100 * time.Millisecond) // the schedule runs on the wall clock: so does the wait for it
	}
	for _, p := range ps {
		p.finish(t)
	}
	info, err := st.GetSchedule(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := st.Peek(ctx, "ticks", mqlite.PeekParams{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	for _, m := range msgs {
		ms, err := strconv.ParseInt(strings.TrimPrefix(m.MessageID, "schedule/tick/"), 10, 64)
		if err != nil {
			t.Fatalf("message %d: MessageID %q", m.Seq, m.MessageID)
		}
		starts = append(starts, ms)
	}
	slices.Sort(starts)
	for i := 1; i < len(starts); i++ {
		if d := time.Duration(starts[i]-starts[i-1]) * time.Millisecond; d != mqlite.MinScheduleEvery {
			t.Errorf("periods %d and %d are %v apart, want %v (twice: a period sent twice)", starts[i-1], starts[i], d, mqlite.MinScheduleEvery)
		}
	}
	if int64(len(msgs)) != info.Fired || info.Skipped != 0 {
		t.Fatalf("%d messages for %d periods fired (%d skipped)", len(msgs), info.Fired, info.Skipped)
	}
	t.Logf("three processes ran one schedule every %v: %d periods, %d messages, one each, none skipped", mqlite.MinScheduleEvery, info.Fired, len(msgs))
}

// listenQuery is what pg_stat_activity shows of a store's listening
// connection: its one statement.
const listenQuery = "LISTEN mqlite_claimable"

// testWake: a Receive waiting in one process is woken by a commit in
// another within milliseconds (LISTEN/NOTIFY); and while its listening
// connection is killed over and over (pg_terminate_backend), by polling.
func testWake(t *testing.T, url string) {
	st := openHarness(t, url)
	ctx := context.Background()
	if err := st.CreateQueue(ctx, "wake", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	app := "mqlite_pgmulti_waiter_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a := start(t, "waiter", roleWaiter, url+"&application_name="+app, "wake")
	b := start(t, "waker", roleWaker, url, "wake")
	round := func() time.Duration {
		b.tell(t, "send")
		b.expect(t, "sent")
		got := a.expect(t, "got")
		t0, _ := strconv.ParseInt(got[1], 10, 64)
		t1, _ := strconv.ParseInt(got[2], 10, 64)
		time.Sleep(10 * time.Millisecond) // the waiter is back in its Receive
		return time.Duration(max(0, t1-t0))
	}
	measure := func(n int) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = round()
		}
		slices.Sort(ds)
		return ds
	}
	measure(3) // the first sends warm the connections
	notified := measure(40)
	p50, p99 := notified[len(notified)/2], notified[len(notified)*99/100]
	t.Logf("wake-ups across processes (LISTEN/NOTIFY): %d, p50 %v, p99 %v, max %v", len(notified), p50, p99, notified[len(notified)-1])
	if p50 > time.Second {
		t.Fatalf("a commit in another process woke the waiting Receive after %v (p50), want milliseconds", p50)
	}

	// The fallback: the waiter's listening connection killed every 20 ms,
	// so that it is never up for a wake-up.
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	kill := func() int64 {
		res, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE query = $1 AND application_name = $2 AND pid <> pg_backend_pid()`, listenQuery, app)
		if err != nil {
			t.Errorf("terminate the listener: %v", err)
			return 0
		}
		n, _ := res.RowsAffected()
		return n
	}
	if kill() != 1 {
		t.Fatalf("no listening connection of the waiter (application_name %s) in pg_stat_activity", app)
	}
	var kills atomic.Int64
	kills.Store(1)
	stop := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				kills.Add(kill())
			}
		}
	}()
	polled := measure(6)
	close(stop)
	<-killed
	p50, worst := polled[len(polled)/2], polled[len(polled)-1]
	t.Logf("wake-ups with the listening connection killed %d times (polling every %v): %d, min %v, p50 %v, max %v",
		kills.Load(), time.Second, len(polled), polled[0], p50, worst)
	if p50 > 3*time.Second {
		t.Fatalf("with its listener killed, the waiting Receive was woken after %v (p50): the polling does not stand in", p50)
	}
	a.finish(t)
	b.finish(t)
}
