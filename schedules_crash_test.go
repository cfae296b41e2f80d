//go:build crash_injection

package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// The schedule crash test: a worker process (this test binary re-executed
// with TestScheduleCrashWorker) runs a store whose schedule sends one
// message per second, and SIGKILLs itself from inside its own Clock. The
// store reads its clock before each firing and, through mqlite_now(),
// inside each enqueue statement of the firing transaction. Every other
// worker kills itself at a random reading (between firings or in one);
// the others at a random one of the first readings inside a firing
// transaction (messages inserted, the schedule not yet advanced), so
// that every run kills in the middle of a firing, half the time. The
// harness restarts a worker after a random downtime, many times, then
// checks that every period from the first to the last is in the queue
// exactly once.
const (
	envSchedWorker = "MQLITE_SCHED_CRASH_DB"
	envSchedAfter  = "MQLITE_SCHED_CRASH_AFTER"  // clock readings before the kill
	envSchedFiring = "MQLITE_SCHED_CRASH_FIRING" // "1": count only the readings inside a firing transaction
	inFiringTx     = "KILL in the firing transaction"
	schedUnreached = "UNREACHED"
	// schedGiveUp is how many clock readings a worker that kills inside a
	// firing transaction makes before it gives up on one: a firing reads
	// the clock inside its transaction at least once a period, beside a
	// few readings outside it (about five a period in all), and the kill
	// is at most the third such reading: 120 readings are about twenty
	// periods.
	schedGiveUp = 120
)

// killClock is the wall clock whose kill-th reading (when kill is set;
// with firing, the kill-th reading inside a firing transaction's enqueue)
// SIGKILLs the process, first saying on stdout whether the reading came
// from inside a firing transaction.
type killClock struct {
	kill     *atomic.Int64
	firing   bool
	readings *atomic.Int64
}

func (c killClock) Now() time.Time {
	if c.kill != nil {
		inTx := strings.Contains(string(debug.Stack()), "sendPeriods")
		if (!c.firing || inTx) && c.kill.Add(-1) == 0 {
			if inTx {
				fmt.Println(inFiringTx)
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		if c.firing && c.readings.Add(1) > schedGiveUp {
			fmt.Printf("%s: %d clock readings and none inside a firing transaction to kill at\n", schedUnreached, schedGiveUp)
			os.Exit(3)
		}
	}
	return time.Now()
}

func schedCrashOptions(c killClock, loop bool) mqlite.Config {
	o := mqlite.Config{Clock: c, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1}
	if loop {
		o.ScheduleInterval = 0 // the default: the loop sleeps until each period
	}
	return o
}

// TestScheduleCrashWorker is the worker process; it does nothing unless the
// harness started it.
func TestScheduleCrashWorker(t *testing.T) {
	path := os.Getenv(envSchedWorker)
	if path == "" {
		t.Skip("runs only as the schedule crash harness's worker process")
	}
	after, _ := strconv.ParseInt(os.Getenv(envSchedAfter), 10, 64)
	var kill, readings atomic.Int64
	kill.Store(after)
	clock := killClock{kill: &kill, firing: os.Getenv(envSchedFiring) == "1", readings: &readings}
	st, err := mqlite.Open(context.Background(), path, schedCrashOptions(clock, true))
	if err != nil {
		t.Fatalf("worker open: %v", err)
	}
	defer st.Close()
	select {} // the loop fires until the clock kills the process
}

func TestScheduleCrash(t *testing.T) {
	const workers = 12
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sched.db")
	clock := killClock{}
	st, err := mqlite.Open(ctx, path, schedCrashOptions(clock, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "ticks", mqlite.QueueOptions{DedupWindow: -1}); err != nil {
		t.Fatal(err)
	}
	err = st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "ticks", Every: time.Second,
		CatchUp: mqlite.MaxScheduleCatchUp, Body: []byte("tick")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	inTx, firingWorkers := 0, 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for w := range workers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScheduleCrashWorker$", "-test.count=1")
		after, firing := 1+rng.IntN(40), w%2 == 1
		if firing {
			after = 1 + rng.IntN(3)
			firingWorkers++
		}
		cmd.Env = append(os.Environ(), envSchedWorker+"="+path, envSchedAfter+"="+strconv.Itoa(after))
		if firing {
			cmd.Env = append(cmd.Env, envSchedFiring+"=1")
		}
		cmd.Stderr = os.Stderr
		var out strings.Builder
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if strings.Contains(out.String(), schedUnreached) {
				t.Fatalf("worker %d never killed itself inside a firing transaction: %s", w, out.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("worker %d ended with %v, want its own SIGKILL", w, err)
			}
			if strings.Contains(out.String(), inFiringTx) {
				inTx++
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("worker %d did not kill itself", w)
		}
		<-time.After(time.Duration(rng.IntN(2500)) * time.Millisecond) // downtime: up to 2 periods missed
	}

	st, err = mqlite.Open(ctx, path, schedCrashOptions(clock, false))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	info, err := st.GetSchedule(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	first := info.Options.Start.Add(time.Second)
	var n int
	for from := int64(0); ; {
		msgs, err := st.Peek(ctx, "ticks", mqlite.PeekParams{FromSeq: from, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if want := mqlite.ScheduleMessageID("tick", first.Add(time.Duration(n)*time.Second)); m.MessageID != want {
				t.Fatalf("message %d is %s, want %s: a period missed or doubled", n, m.MessageID, want)
			}
			n++
		}
		from = msgs[len(msgs)-1].Seq + 1
	}
	if int64(n) != info.Fired || info.Skipped != 0 || n == 0 ||
		!info.LastAt.Equal(first.Add(time.Duration(n-1)*time.Second)) {
		t.Fatalf("%d messages; schedule fired %d, skipped %d, last %v", n, info.Fired, info.Skipped, info.LastAt)
	}
	t.Logf("%d self-SIGKILLs (%d inside a firing transaction; %d workers kill only there); %d periods, each sent once, none skipped", workers, inTx, firingWorkers, n)
	if inTx < firingWorkers {
		t.Fatalf("%d kills inside a firing transaction, want at least the %d of the workers that kill there", inTx, firingWorkers)
	}
}
