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
// message per second, and SIGKILLs itself from inside its own Clock
// after a random number of readings. The store reads its clock before each
// firing and, through mqlite_now(), inside each enqueue statement of the
// firing transaction, so the kills land between firings and in the middle
// of one (messages inserted, the schedule not yet advanced). The harness
// restarts a worker after a random downtime, many times, then checks that
// every period from the first to the last is in the queue exactly once.
const (
	envSchedWorker = "MQLITE_SCHED_CRASH_DB"
	envSchedAfter  = "MQLITE_SCHED_CRASH_AFTER" // clock readings before the kill
	inFiringTx     = "KILL in the firing transaction"
)

// killClock is the wall clock whose kill-th reading (when kill is set)
// SIGKILLs the process, first saying on stdout whether the reading came
// from inside a firing transaction's enqueue.
type killClock struct{ kill *atomic.Int64 }

func (c killClock) Now() time.Time {
	if c.kill != nil && c.kill.Add(-1) == 0 {
		if strings.Contains(string(debug.Stack()), "sendPeriods") {
			fmt.Println(inFiringTx)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
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
	var kill atomic.Int64
	kill.Store(after)
	st, err := mqlite.Open(context.Background(), path, schedCrashOptions(killClock{&kill}, true))
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

	inTx := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for w := range workers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScheduleCrashWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), envSchedWorker+"="+path, envSchedAfter+"="+strconv.Itoa(1+rng.IntN(40)))
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
	t.Logf("%d self-SIGKILLs (%d inside a firing transaction); %d periods, each sent once, none skipped", workers, inTx, n)
	if inTx == 0 {
		t.Log("no kill landed inside a firing transaction this run")
	}
}
