//go:build crash_injection

package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// TestScheduleBrokerCrash runs a per-second schedule in a broker
// process that is SIGKILLed several times, each time restarted after a
// random downtime of up to 2.5 s, as a standby would take the file over.
// In the end every period from the first to the last fired is in the
// queue exactly once (its queue de-duplicates nothing, so a double would
// show), none was skipped, and the schedule's counters agree.
func TestScheduleBrokerCrash(t *testing.T) {
	const kills = 4
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sched.db")
	st, err := mqlite.Open(ctx, path, mqlite.Config{ScheduleInterval: -1})
	must(t, err)
	must(t, st.CreateQueue(ctx, "ticks", mqlite.QueueOptions{DedupWindow: -1}))
	must(t, st.CreateSchedule(ctx, "tick", mqlite.ScheduleOptions{Target: "ticks", Every: time.Second}))
	must(t, st.Close())

	p := startBroker(t, path, "")
	addr := strings.TrimPrefix(p.url, "http://")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for k := range kills {
		<-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond) // real processes: real time
		p.kill()
		<-time.After(time.Duration(rng.IntN(2500)) * time.Millisecond)
		p = startBroker(t, path, addr)
		t.Logf("kill %d done", k+1)
	}
	<-time.After(1500 * time.Millisecond)
	p.stop(t)

	st, err = mqlite.Open(ctx, path, mqlite.Config{ScheduleInterval: -1})
	must(t, err)
	defer st.Close()
	info, err := st.GetSchedule(ctx, "tick")
	must(t, err)
	msgs, err := st.Peek(ctx, "ticks", mqlite.PeekParams{Max: 1000})
	must(t, err)
	first := info.Options.Start.Add(time.Second)
	for i, m := range msgs {
		if want := mqlite.ScheduleMessageID("tick", first.Add(time.Duration(i)*time.Second)); m.MessageID != want {
			t.Fatalf("message %d is %s, want %s: a period missed or doubled", i, m.MessageID, want)
		}
	}
	if int64(len(msgs)) != info.Fired || info.Skipped != 0 || len(msgs) == 0 ||
		!info.LastAt.Equal(first.Add(time.Duration(len(msgs)-1)*time.Second)) {
		t.Fatalf("%d messages; schedule fired %d, skipped %d, last %v", len(msgs), info.Fired, info.Skipped, info.LastAt)
	}
	t.Logf("%d kills; %d periods, each sent once, none skipped (%s)", kills, len(msgs), fmt.Sprint(info.LastAt.Sub(first)))
}
