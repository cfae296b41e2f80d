package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/relay"
)

// The source crash test: an intake process (the test binary, re-executed
// as the source package's worker test) takes a far side's messages into
// Queue of a file, and is SIGKILLed on the way: every other worker by
// itself between the commit of a batch and its acknowledgement (KillAt,
// a few batches in), the others by the harness at a random moment of
// their work (once the far side's unacknowledged count falls past a mark;
// such a worker never kills itself), the marks spread over the run, so
// that the kills cover most of the messages. The control acknowledges
// each batch before committing it (AckFirst) and kills itself between the
// two: it loses messages, so the check that every message is in the queue
// exactly once can fail.
const (
	envSourceDB     = "MQLITE_SOURCE_CRASH_DB"
	envSourceKillAt = "MQLITE_SOURCE_CRASH_KILL_AT" // the batch whose Ack kills the worker; 0: none
	envSourceAck    = "MQLITE_SOURCE_CRASH_ACK_FIRST"
	envSourceNewIDs = "MQLITE_SOURCE_CRASH_NEW_IDS" // "1": each process gives the messages ids of its own
	envSourceFinal  = "MQLITE_SOURCE_CRASH_FINAL"   // "1": a clean run after the kills
)

// FinalRound reports whether the worker is one of the clean runs after
// the kills, which the harness stops with SIGTERM once the far side has
// nothing unacknowledged. A source whose count leaves out the messages
// sent ahead to the consumer (RabbitMQ's ready count) takes them one at a
// time there, so that the worker holds at most one when it is stopped.
func FinalRound() bool { return os.Getenv(envSourceFinal) == "1" }

// CrashWindow is the dedup window of the source crash test's queue: above
// a test source's redelivery plus the intake's default outage.
const CrashWindow = 2 * time.Hour

// SourceWorker is the body of a source crash test's worker: it does
// nothing (and returns false) unless the harness started it; then it takes
// src into the harness's file until SIGTERM, killing itself where the
// harness said.
func SourceWorker(t *testing.T, open func(t *testing.T) relay.Source) bool {
	path := os.Getenv(envSourceDB)
	if path == "" {
		return false
	}
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := open(t)
	killAt, _ := strconv.Atoi(os.Getenv(envSourceKillAt))
	src = &killingSource{Source: src, killAt: killAt, ackFirst: os.Getenv(envSourceAck) == "1", newIDs: os.Getenv(envSourceNewIDs) == "1"}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	in, err := relay.NewIntake(st, Queue, src, relay.IntakeConfig{
		MaxBatch: 50, Backoff: consumer.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return true
}

// killingSource SIGKILLs its process at its killAt-th Ack, between the
// commit and the acknowledgement; with ackFirst it acknowledges each batch
// in Fetch, before the commit, and kills itself there instead; with newIDs
// it suffixes each id with its process id, so that a message delivered
// again to the next process has another id.
type killingSource struct {
	relay.Source
	killAt, acks     int
	ackFirst, newIDs bool
}

func (k *killingSource) Fetch(ctx context.Context, max int) ([]relay.Inbound, error) {
	msgs, err := k.Source.Fetch(ctx, max)
	if err == nil && k.newIDs {
		for i := range msgs {
			msgs[i].MessageID += fmt.Sprintf("#%d", os.Getpid())
		}
	}
	if err != nil || !k.ackFirst {
		return msgs, err
	}
	if err := k.Source.Ack(ctx, msgs); err != nil {
		return nil, err
	}
	k.acks++
	if k.acks == k.killAt {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return msgs, nil
}

func (k *killingSource) Ack(ctx context.Context, msgs []relay.Inbound) error {
	if k.ackFirst {
		return nil
	}
	k.acks++
	if k.acks == k.killAt {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return k.Source.Ack(ctx, msgs)
}

// SourceCrash is a source crash test's plan.
type SourceCrash struct {
	// Worker is the name of the package's worker test, which calls
	// SourceWorker.
	Worker string
	// Env is the worker's further environment (the far side's address).
	Env []string
	// Bodies are the bodies of the messages in the far side, each its own.
	Bodies []string
	// Kills is how many worker processes die: the odd ones kill
	// themselves at a batch's acknowledgement, the even ones are killed by
	// the harness once Unacked falls past their mark, the k-th of them
	// k/(Kills+1) of the way through the messages.
	Kills int
	// Unacked returns how many of the far side's messages are not
	// acknowledged yet.
	Unacked func() int64
	// AckFirst is a control: acknowledge before the commit.
	AckFirst bool
	// NewIDs is a control: each process gives the messages ids of its own.
	NewIDs bool
}

// CrashResult is what a source crash test found in the queue: its rows,
// the bodies missing and the bodies in more than one row; and what its
// kills exercised: the kills at a random moment (by the harness) and at
// an acknowledgement (by the worker itself), and the messages the far side
// had acknowledged when the last kill fell (Covered).
type CrashResult struct {
	Rows, Lost, Twice, Kills int
	RandomKills, AckKills    int
	Covered, Messages        int
}

// String says what the run exercised and found.
func (r CrashResult) String() string {
	return fmt.Sprintf("%d SIGKILLs (%d at random, %d at the ack), the kills covered %d of %d messages: %d rows, %d lost, %d twice",
		r.Kills, r.RandomKills, r.AckKills, r.Covered, r.Messages, r.Rows, r.Lost, r.Twice)
}

// RunSourceCrash runs plan and returns what the queue holds once the far
// side has nothing unacknowledged.
func RunSourceCrash(t *testing.T, plan SourceCrash) CrashResult {
	t.Helper()
	path := filepath.Join(t.TempDir(), "intake.db")
	b := testdb.OpenPath(t, path, mqlite.Config{})
	b.Queue(t, Queue, mqlite.QueueOptions{DedupWindow: CrashWindow})
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	flag := map[bool]string{true: "1", false: "0"}
	env := append([]string{envSourceDB + "=" + path, envSourceAck + "=" + flag[plan.AckFirst], envSourceNewIDs + "=" + flag[plan.NewIDs]}, plan.Env...)
	n := int64(len(plan.Bodies))
	r := CrashResult{Kills: plan.Kills, Messages: len(plan.Bodies)}
	for k := 1; k <= plan.Kills; k++ {
		killAt, mark := 2+k%5, int64(0) // a worker left to kill itself is killed when nothing is left
		if k%2 == 0 {                   // the harness kills this one at a random moment of its work
			killAt, mark = 0, n-int64(k)*n/int64(plan.Kills+1)
		}
		w := startSourceWorker(t, plan.Worker, append(env, fmt.Sprintf("%s=%d", envSourceKillAt, killAt))...)
		w.waitUnacked(t, plan.Unacked, mark)
		select {
		case <-w.exited:
			r.AckKills++ // it killed itself first
		default:
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			<-w.exited
			if killAt == 0 {
				r.RandomKills++
			} else {
				r.AckKills++ // a self-killer left with nothing to acknowledge
			}
		}
	}
	r.Covered = int(n - plan.Unacked())
	for round := 0; ; round++ {
		if round == 50 {
			t.Fatal("the far side keeps unacknowledged messages after 50 clean runs")
		}
		w := startSourceWorker(t, plan.Worker, append(env, envSourceFinal+"=1")...)
		w.waitUnacked(t, plan.Unacked, 0)
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		// A worker that gets SIGTERM before it set its handler dies of it,
		// which is as clean: it had taken nothing.
		var exit *exec.ExitError
		<-w.exited
		if err := w.err; err != nil && !(errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM) {
			t.Fatalf("worker stopped by SIGTERM: %v", err)
		}
		if plan.Unacked() == 0 {
			break
		}
	}
	b = testdb.OpenPath(t, path, mqlite.Config{})
	got := map[string]int{}
	for _, body := range testdb.Strings(t, b.Store.DB(), "SELECT CAST(body AS TEXT) FROM mqlite_messages WHERE queue = ?", Queue) {
		got[body]++
	}
	for _, c := range got {
		r.Rows += c
		if c > 1 {
			r.Twice++
		}
	}
	for _, body := range plan.Bodies {
		if got[body] == 0 {
			r.Lost++
		}
	}
	return r
}

// sourceWorker is a worker process; exited is closed when it exited, err
// then holds how.
type sourceWorker struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startSourceWorker(t *testing.T, worker string, env ...string) *sourceWorker {
	w := &sourceWorker{cmd: StartWorker(t, worker, env...), exited: make(chan struct{})}
	go func() {
		w.err = w.cmd.Wait()
		close(w.exited)
	}()
	return w
}

// waitUnacked waits until unacked is at most mark or the worker exited,
// failing the test when the count stood still for Timeout.
func (w *sourceWorker) waitUnacked(t *testing.T, unacked func() int64, mark int64) {
	t.Helper()
	pollMoving(t, fmt.Sprintf("the far side's unacknowledged messages to fall to %d", mark), unacked,
		func(u int64) bool { return u <= mark }, w.exited)
}

// SourceCrashTest runs a source's crash test, with n messages and kills
// SIGKILLs, and its two controls (500 messages and 3 SIGKILLs each) side
// by side: one acknowledges each batch before its commit, the other gives
// the messages new ids in each process. setup puts m messages in a fresh
// far side and returns the plan to take them (Worker, Env, Bodies,
// Unacked). The test fails unless every message is in the queue once, the
// first control unless it lost some, the second unless it took some twice.
func SourceCrashTest(t *testing.T, n, kills int, setup func(t *testing.T, m int) SourceCrash) {
	for _, tc := range []struct {
		name             string
		ackFirst, newIDs bool
		n, kills         int
	}{
		{"ack after commit", false, false, n, kills},
		{"control: ack before commit", true, false, 500, 3},
		{"control: new ids after a restart", false, true, 500, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan := setup(t, tc.n)
			plan.Kills, plan.AckFirst, plan.NewIDs = tc.kills, tc.ackFirst, tc.newIDs
			r := RunSourceCrash(t, plan)
			t.Logf("%s: %v", tc.name, r)
			switch {
			case r.RandomKills == 0:
				t.Fatalf("no kill at a random moment fired (%v): the run cannot see a loss there", r)
			case tc.ackFirst:
				if r.Lost == 0 {
					t.Fatalf("acknowledging before the commit lost nothing (%+v): the check cannot fail", r)
				}
			case tc.newIDs:
				if r.Twice == 0 {
					t.Fatalf("new ids after each restart took nothing twice (%+v): the check cannot fail", r)
				}
			case r.Lost != 0 || r.Twice != 0 || r.Rows != tc.n:
				t.Fatalf("%d messages: %v", tc.n, r)
			}
		})
	}
}
