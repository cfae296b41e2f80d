package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
)

// noDedup is the queue of the schedule tests: with de-duplication off, a
// period sent twice would show as two messages, so exactly-once is proven by
// the schedule's own advance, not hidden by the dedup table.
var noDedup = mqlite.QueueOptions{DedupWindow: -1}

// periodsIn returns the period starts of schedule name's messages in queue,
// in sequence order, read from their MessageIDs.
func periodsIn(t *testing.T, st *mqlite.Store, queue, name string) []time.Time {
	t.Helper()
	msgs, err := st.Peek(context.Background(), queue, mqlite.PeekParams{Max: 1000})
	if err != nil {
		t.Fatalf("peek %s: %v", queue, err)
	}
	var out []time.Time
	for _, m := range msgs {
		var ms int64
		if _, err := fmt.Sscanf(m.MessageID, "schedule/"+name+"/%d", &ms); err != nil {
			t.Fatalf("message %d: MessageID %q is not a period of %s", m.Seq, m.MessageID, name)
		}
		out = append(out, time.UnixMilli(ms))
	}
	return out
}

// wantPeriods checks that queue holds exactly one message per period
// first, first+every, ..., n of them, in order.
func wantPeriods(t *testing.T, st *mqlite.Store, queue, name string, first time.Time, every time.Duration, n int) {
	t.Helper()
	got := periodsIn(t, st, queue, name)
	want := make([]time.Time, n)
	for i := range want {
		want[i] = first.Add(time.Duration(i) * every)
	}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("periods sent:\n got %v\nwant %v", got, want)
	}
}

func fire(t *testing.T, st *mqlite.Store) int64 {
	t.Helper()
	n, err := mqlite.FireSchedules(context.Background(), st)
	if err != nil {
		t.Fatalf("FireSchedules: %v", err)
	}
	return n
}

func getSchedule(t *testing.T, st *mqlite.Store, name string) mqlite.ScheduleInfo {
	t.Helper()
	si, err := st.GetSchedule(context.Background(), name)
	if err != nil {
		t.Fatalf("GetSchedule(%s): %v", name, err)
	}
	return si
}

func TestScheduleCRUD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	st := b.Store
	b.Queue(t, "q", mqlite.QueueOptions{})
	if err := st.CreateTopic(ctx, "events"); err != nil {
		t.Fatal(err)
	}

	hourly := mqlite.ScheduleOptions{Target: "q", Cron: "@hourly", Body: []byte("tick"), Subject: "s",
		Properties: map[string]string{"k": "v"}, GroupID: "g", TTL: time.Minute}
	if err := st.CreateSchedule(ctx, "hourly", hourly); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchedule(ctx, "every", mqlite.ScheduleOptions{Target: "events", Every: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got := getSchedule(t, st, "hourly")
	want := hourly
	want.CatchUp = mqlite.DefaultScheduleCatchUp
	if got.Name != "hourly" || fmt.Sprint(got.Options) != fmt.Sprint(want) {
		t.Fatalf("GetSchedule = %+v, want options %+v", got.Options, want)
	}
	if next := testdb.Start.Truncate(time.Hour).Add(time.Hour); !got.NextAt.Equal(next) || !got.LastAt.IsZero() {
		t.Fatalf("NextAt %v LastAt %v, want %v and zero", got.NextAt, got.LastAt, next)
	}
	every := getSchedule(t, st, "every")
	if !every.NextAt.Equal(testdb.Start.Add(90*time.Second)) || !every.Options.Start.Equal(testdb.Start) {
		t.Fatalf("interval schedule: NextAt %v Start %v, want Start+90s and Start", every.NextAt, every.Options.Start)
	}
	list, err := st.ListSchedules(ctx, mqlite.ListSchedulesParams{})
	if err != nil || len(list) != 2 || list[0].Name != "every" || list[1].Name != "hourly" {
		t.Fatalf("ListSchedules = %+v, %v; want every, hourly", list, err)
	}

	hourly.Cron, hourly.TimeZone, hourly.Body = "30 9 * * *", "America/New_York", []byte("tock")
	if err := st.UpdateSchedule(ctx, "hourly", hourly); err != nil {
		t.Fatal(err)
	}
	got = getSchedule(t, st, "hourly")
	ny, _ := time.LoadLocation("America/New_York")
	if next := time.Date(2026, 1, 2, 9, 30, 0, 0, ny); !got.NextAt.Equal(next) || string(got.Options.Body) != "tock" {
		t.Fatalf("after update: NextAt %v body %q, want %v and tock", got.NextAt, got.Options.Body, next)
	}
	if err := st.DeleteSchedule(ctx, "hourly"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSchedule(ctx, "hourly"); !errors.Is(err, mqlite.ErrScheduleNotFound) {
		t.Fatalf("GetSchedule after delete: %v, want ErrScheduleNotFound", err)
	}

	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"exists", func() error {
			return st.CreateSchedule(ctx, "every", mqlite.ScheduleOptions{Target: "q", Every: time.Hour})
		}, mqlite.ErrScheduleExists},
		{"update missing", func() error {
			return st.UpdateSchedule(ctx, "nope", mqlite.ScheduleOptions{Target: "q", Every: time.Hour})
		}, mqlite.ErrScheduleNotFound},
		{"delete missing", func() error { return st.DeleteSchedule(ctx, "nope") }, mqlite.ErrScheduleNotFound},
		{"missing target", func() error {
			return st.CreateSchedule(ctx, "x", mqlite.ScheduleOptions{Target: "nope", Every: time.Hour})
		}, mqlite.ErrQueueNotFound},
	} {
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	long := strings.Repeat("x", mqlite.MaxSubjectLen+1)
	for _, tc := range []struct {
		name      string
		schedName string
		o         mqlite.ScheduleOptions
		kind      error
	}{
		{"bad cron", "x", mqlite.ScheduleOptions{Target: "q", Cron: "61 * * * *"}, mqlite.ErrInvalidSchedule},
		{"six fields", "x", mqlite.ScheduleOptions{Target: "q", Cron: "0 0 * * * *"}, mqlite.ErrInvalidSchedule},
		{"neither", "x", mqlite.ScheduleOptions{Target: "q"}, mqlite.ErrInvalidSchedule},
		{"both", "x", mqlite.ScheduleOptions{Target: "q", Cron: "@daily", Every: time.Hour}, mqlite.ErrInvalidSchedule},
		{"too often", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Millisecond}, mqlite.ErrInvalidSchedule},
		{"zone with every", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Hour, TimeZone: "UTC"}, mqlite.ErrInvalidSchedule},
		{"unknown zone", "x", mqlite.ScheduleOptions{Target: "q", Cron: "@daily", TimeZone: "Mars/Olympus"}, mqlite.ErrInvalidSchedule},
		{"zone twice", "x", mqlite.ScheduleOptions{Target: "q", Cron: "CRON_TZ=UTC @daily", TimeZone: "UTC"}, mqlite.ErrInvalidSchedule},
		{"never fires", "x", mqlite.ScheduleOptions{Target: "q", Cron: "0 0 30 2 *"}, mqlite.ErrInvalidSchedule},
		{"catch-up", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Hour, CatchUp: mqlite.MaxScheduleCatchUp + 1}, mqlite.ErrInvalidSchedule},
		{"negative catch-up", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Hour, CatchUp: -1}, mqlite.ErrInvalidSchedule},
		{"bad name", "a b", mqlite.ScheduleOptions{Target: "q", Every: time.Hour}, mqlite.ErrInvalidSchedule},
		{"bad target", "x", mqlite.ScheduleOptions{Target: "", Every: time.Hour}, mqlite.ErrInvalidQueueName},
		{"long subject", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Subject: long}, mqlite.ErrInvalidMessage},
		{"negative ttl", "x", mqlite.ScheduleOptions{Target: "q", Every: time.Hour, TTL: -time.Second}, mqlite.ErrInvalidTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := map[string]error{"create": st.CreateSchedule(ctx, tc.schedName, tc.o)}
			if tc.schedName == "x" {
				errs["update"] = st.UpdateSchedule(ctx, "every", tc.o)
			}
			for op, err := range errs {
				var ia *mqlite.InvalidArgumentError
				if !errors.Is(err, tc.kind) || !errors.Is(err, mqlite.ErrInvalidArgument) || !errors.As(err, &ia) {
					t.Errorf("%s: %v, want an InvalidArgumentError of %v", op, err, tc.kind)
				}
			}
		})
	}
	big := mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Body: make([]byte, mqlite.DefaultMaxMessageBytes)}
	if err := st.CreateSchedule(ctx, "big", big); !errors.Is(err, mqlite.ErrMessageTooLarge) {
		t.Errorf("oversize body: %v, want ErrMessageTooLarge", err)
	}
	if list, _ := st.ListSchedules(ctx, mqlite.ListSchedulesParams{}); len(list) != 1 {
		t.Fatalf("failed calls wrote schedules: %+v", list)
	}
	if got := getSchedule(t, st, "every"); got.Options.Every != 90*time.Second {
		t.Fatalf("failed updates changed the schedule: %+v", got.Options)
	}
}

// TestScheduleFiresOncePerPeriod: a period's message is sent when the
// period begins, once, whatever number of firings look at it.
func TestScheduleFiresOncePerPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", noDedup)
	err := b.Store.CreateSchedule(ctx, "m", mqlite.ScheduleOptions{Target: "q", Every: time.Minute,
		Body: []byte("tick"), Subject: "subj", Properties: map[string]string{"k": "v"}, GroupID: "g", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	first := testdb.Start.Add(time.Minute)
	if n := fire(t, b.Store); n != 0 {
		t.Fatalf("fired %d before the first period", n)
	}
	b.Clock.Advance(time.Minute - time.Millisecond)
	if n := fire(t, b.Store); n != 0 {
		t.Fatalf("fired %d a millisecond before the first period", n)
	}
	for i := range 3 {
		b.Clock.Advance(time.Millisecond)
		if n := fire(t, b.Store); n != 1 {
			t.Fatalf("period %d: fired %d, want 1", i, n)
		}
		if n := fire(t, b.Store); n != 0 {
			t.Fatalf("period %d fired again: %d", i, n)
		}
		b.Clock.Advance(time.Minute - time.Millisecond)
		if n := fire(t, b.Store); n != 0 {
			t.Fatalf("fired %d inside period %d", n, i)
		}
	}
	wantPeriods(t, b.Store, "q", "m", first, time.Minute, 3)
	msgs, err := b.Store.Peek(ctx, "q", mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	m := msgs[0]
	if string(m.Body) != "tick" || m.Subject != "subj" || m.Properties["k"] != "v" || m.GroupID != "g" ||
		!m.ExpiresAt.Equal(first.Add(time.Hour)) || m.MessageID != mqlite.ScheduleMessageID("m", first) {
		t.Fatalf("message = %+v", m)
	}
	if si := getSchedule(t, b.Store, "m"); si.Fired != 3 || si.Skipped != 0 || !si.LastAt.Equal(first.Add(2*time.Minute)) {
		t.Fatalf("info = %+v", si)
	}
}

// TestScheduleCronInTimeZone: a cron schedule fires at its activations in
// its time zone, through a topic into every subscription.
func TestScheduleCronInTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	if err := b.Store.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		if err := b.Store.CreateSubscription(ctx, "t", q, mqlite.SubscriptionOptions{Queue: noDedup}); err != nil {
			t.Fatal(err)
		}
	}
	err := b.Store.CreateSchedule(ctx, "c", mqlite.ScheduleOptions{Target: "t", Cron: "0 9 * * *", TimeZone: "Asia/Tokyo"})
	if err != nil {
		t.Fatal(err)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	first := time.Date(2026, 1, 3, 9, 0, 0, 0, tokyo) // Start is 12:04 in Tokyo
	b.Clock.Set(first.Add(-time.Millisecond))
	if n := fire(t, b.Store); n != 0 {
		t.Fatalf("fired %d before 09:00 Tokyo", n)
	}
	b.Clock.Set(first.Add(24*time.Hour + time.Second))
	if n := fire(t, b.Store); n != 2 {
		t.Fatalf("fired %d, want the two periods due", n)
	}
	for _, q := range []string{"a", "b"} {
		wantPeriods(t, b.Store, q, "c", first, 24*time.Hour, 2)
	}
}

// reopen closes st and opens its file again with the same clock, the loop
// off, as a restart or a standby taking over after the first store ended.
func reopen(t *testing.T, st *mqlite.Store, clock mqlite.Clock) *mqlite.Store {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := mqlite.Open(context.Background(), st.Path(), loopsOff(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st2.Close() })
	return st2
}

func loopsOff(clock mqlite.Clock) mqlite.Config {
	return mqlite.Config{Clock: clock, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1}
}

// TestScheduleCatchUpAcrossRestart: periods missed while no store had the
// file open are sent when it opens again, each once, the latest CatchUp of
// them; the earlier ones are skipped and counted.
func TestScheduleCatchUpAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", noDedup)
	err := b.Store.CreateSchedule(ctx, "m", mqlite.ScheduleOptions{Target: "q", Every: time.Minute, CatchUp: 3})
	if err != nil {
		t.Fatal(err)
	}
	first := testdb.Start.Add(time.Minute)
	b.Clock.Set(first.Add(30 * time.Second))
	if n := fire(t, b.Store); n != 1 {
		t.Fatalf("fired %d, want 1", n)
	}

	// Down for three whole periods, back mid-period: all three are sent.
	st := reopen(t, b.Store, b.Clock)
	b.Clock.Advance(3 * time.Minute)
	if n := fire(t, st); n != 3 {
		t.Fatalf("after a restart over 3 periods: fired %d, want 3", n)
	}
	if n := fire(t, st); n != 0 {
		t.Fatalf("fired %d again", n)
	}
	wantPeriods(t, st, "q", "m", first, time.Minute, 4)

	// Down for seven: only the latest three (CatchUp) are sent.
	st = reopen(t, st, b.Clock)
	b.Clock.Advance(7 * time.Minute)
	if n := fire(t, st); n != 3 {
		t.Fatalf("after a restart over 7 periods: fired %d, want CatchUp = 3", n)
	}
	got := periodsIn(t, st, "q", "m")
	want := []time.Time{first.Add(8 * time.Minute), first.Add(9 * time.Minute), first.Add(10 * time.Minute)}
	if !slices.EqualFunc(got[4:], want, time.Time.Equal) {
		t.Fatalf("caught up %v, want %v", got[4:], want)
	}
	si := getSchedule(t, st, "m")
	if si.Fired != 7 || si.Skipped != 4 || !si.NextAt.Equal(first.Add(11*time.Minute)) {
		t.Fatalf("info = fired %d skipped %d next %v; want 7, 4, %v", si.Fired, si.Skipped, si.NextAt, first.Add(11*time.Minute))
	}
}

// openScheduleLoop opens path, in a synctest bubble, with the schedule loop
// alone: its safety-net interval is a day, so it wakes only for periods.
func openScheduleLoop(t *testing.T, path string) *mqlite.Store {
	t.Helper()
	o := loopsOff(nil)
	o.ScheduleInterval = 24 * time.Hour
	st, err := mqlite.Open(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// bubbleSchedule opens path with openScheduleLoop, creates the queue "q"
// and, once the loop sleeps, the schedule "m" into it every every; it
// returns the store and the moment the schedule was created.
func bubbleSchedule(t *testing.T, path string, every time.Duration) (*mqlite.Store, time.Time) {
	t.Helper()
	ctx := context.Background()
	st := openScheduleLoop(t, path)
	if err := st.CreateQueue(ctx, "q", noDedup); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the loop sleeps for a day: no schedule yet
	start := time.Now()
	if err := st.CreateSchedule(ctx, "m", mqlite.ScheduleOptions{Target: "q", Every: every}); err != nil {
		t.Fatal(err)
	}
	return st, start
}

// sleepThenWant lets d of the bubble's time pass, waits for the loop to
// settle and checks that st's queue "q" holds periods 1 to n of "m".
func sleepThenWant(t *testing.T, st *mqlite.Store, d time.Duration, start time.Time, every time.Duration, n int) {
	t.Helper()
	time.Sleep(d)
	synctest.Wait()
	wantPeriods(t, st, "q", "m", start.Add(every), every, n)
}

// TestScheduleTakeover runs the loop in a synctest bubble (the system clock
// is fake there): a first store sends two periods and closes mid-period;
// a second store opens the file three periods later, as a standby taking
// over, and goes on. No period is missed, none doubled.
func TestScheduleTakeover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(dir, "mq.db")
		st, start := bubbleSchedule(t, path, time.Minute)
		sleepThenWant(t, st, 150*time.Second, start, time.Minute, 2) // fake time: periods 1 and 2 begin
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}

		time.Sleep(3 * time.Minute) // nobody holds the file: periods 3 to 5 begin
		st = openScheduleLoop(t, path)
		defer st.Close()
		synctest.Wait() // the new store's loop catches up at once
		wantPeriods(t, st, "q", "m", start.Add(time.Minute), time.Minute, 5)
		sleepThenWant(t, st, 2*time.Minute, start, time.Minute, 7)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestScheduleLoopWakesAtNextPeriod: with a safety-net interval of a day,
// the loop still sends each period as it begins (it sleeps until the next
// one, not a fixed tick), and a schedule created while it sleeps wakes it.
func TestScheduleLoopWakesAtNextPeriod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		st, start := bubbleSchedule(t, filepath.Join(dir, "mq.db"), time.Hour)
		defer st.Close()
		sleepThenWant(t, st, time.Hour-time.Millisecond, start, time.Hour, 0)
		sleepThenWant(t, st, time.Millisecond, start, time.Hour, 1)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestUpdateScheduleConcurrentWithFiring: updates race firings on a moving
// clock; every period from the first to the last is sent exactly once, each
// with the body of the options in force when it began.
func TestUpdateScheduleConcurrentWithFiring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", noDedup)
	opts := mqlite.ScheduleOptions{Target: "q", Every: time.Second, CatchUp: mqlite.MaxScheduleCatchUp, Body: []byte("0")}
	if err := b.Store.CreateSchedule(ctx, "m", opts); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		for range 300 {
			b.Clock.Advance(250 * time.Millisecond)
			if _, err := mqlite.FireSchedules(ctx, b.Store); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		for i := range 100 {
			o := opts
			o.Body = fmt.Appendf(nil, "%d", i+1)
			if err := b.Store.UpdateSchedule(ctx, "m", o); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fire(t, b.Store)
	wantPeriods(t, b.Store, "q", "m", testdb.Start.Add(time.Second), time.Second, 75)
	if si := getSchedule(t, b.Store, "m"); si.Fired != 75 || si.Skipped != 0 || string(si.Options.Body) != "100" {
		t.Fatalf("info = %+v", si)
	}
}

// TestScheduleTargetDeleted: a period whose target is gone is skipped and
// the reason kept; the schedule goes on once the target is back.
func TestScheduleTargetDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", noDedup)
	if err := b.Store.CreateSchedule(ctx, "m", mqlite.ScheduleOptions{Target: "q", Every: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Minute)
	if n := fire(t, b.Store); n != 0 {
		t.Fatalf("fired %d into a deleted queue", n)
	}
	si := getSchedule(t, b.Store, "m")
	if si.Skipped != 1 || !strings.Contains(si.LastError, "not found") {
		t.Fatalf("info = %+v, want one skipped period and the reason", si)
	}
	b.Queue(t, "q", noDedup)
	b.Clock.Advance(time.Minute)
	if n := fire(t, b.Store); n != 1 {
		t.Fatalf("fired %d once the queue is back, want 1", n)
	}
	if si := getSchedule(t, b.Store, "m"); si.LastError != "" || si.Fired != 1 {
		t.Fatalf("info = %+v", si)
	}
}

// TestCloseInsideTxWithScheduleLoopWaiting: the schedule loop, woken by a
// period while a Tx callback holds the connection, waits for it; Close
// called from that callback must not wait for the loop (a deadlock the
// firing's uncancellable begin once caused).
func TestCloseInsideTxWithScheduleLoopWaiting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		st, _ := bubbleSchedule(t, filepath.Join(dir, "mq.db"), time.Second)
		var closeErr error
		err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			time.Sleep(2 * time.Second) // a period begins: the loop queues up behind this transaction
			synctest.Wait()
			closeErr = st.Close()
			return nil
		})
		if !errors.Is(err, mqlite.ErrClosed) || closeErr != nil {
			t.Fatalf("Tx = %v, Close = %v; want ErrClosed and nil", err, closeErr)
		}
	})
}

// TestUpdateScheduleAfterTheClockStepsBack: an update computes the next
// period after the last one fired, not after now: with the clock stepped
// back before that period, the update must not make it fire twice.
func TestUpdateScheduleAfterTheClockStepsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{ScheduleInterval: -1})
	b.Queue(t, "q", noDedup)
	opts := mqlite.ScheduleOptions{Target: "q", Every: time.Minute, Body: []byte("tick")}
	if err := b.Store.CreateSchedule(ctx, "m", opts); err != nil {
		t.Fatal(err)
	}
	first := testdb.Start.Add(time.Minute)
	b.Clock.Advance(time.Minute)
	if n := fire(t, b.Store); n != 1 {
		t.Fatalf("fired %d at the first period, want 1", n)
	}
	b.Clock.Set(testdb.Start.Add(30 * time.Second)) // before the period fired
	opts.Body = []byte("tock")
	if err := b.Store.UpdateSchedule(ctx, "m", opts); err != nil {
		t.Fatal(err)
	}
	if si := getSchedule(t, b.Store, "m"); !si.NextAt.After(si.LastAt) || !si.LastAt.Equal(first) {
		t.Fatalf("after the update: next %v, last %v; want the next period after %v", si.NextAt, si.LastAt, first)
	}
	b.Clock.Set(first)
	if n := fire(t, b.Store); n != 0 {
		t.Fatalf("the period fired before the update fired again: %d", n)
	}
	b.Clock.Advance(time.Minute)
	if n := fire(t, b.Store); n != 1 {
		t.Fatalf("fired %d at the second period, want 1", n)
	}
	wantPeriods(t, b.Store, "q", "m", first, time.Minute, 2)
}

// TestListSchedulesPages: ListSchedules answers one page, after a name, at
// most Max schedules, within MaxBytes (the first whatever its size); bad
// options are refused.
func TestListSchedulesPages(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", noDedup)
	st := tb.Store
	ctx := context.Background()
	for i, size := range []int{10, 10, 500, 10, 10} {
		opts := mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Body: make([]byte, size)}
		if err := st.CreateSchedule(ctx, fmt.Sprint("s", i), opts); err != nil {
			t.Fatal(err)
		}
	}
	// Each schedule weighs its body, its name (2) and its target (1).
	for _, c := range []struct {
		name string
		opts mqlite.ListSchedulesParams
		want []string
	}{
		{"every one", mqlite.ListSchedulesParams{}, []string{"s0", "s1", "s2", "s3", "s4"}},
		{"max", mqlite.ListSchedulesParams{Max: 2}, []string{"s0", "s1"}},
		{"after", mqlite.ListSchedulesParams{After: "s1", Max: 2}, []string{"s2", "s3"}},
		{"after a name that is not there", mqlite.ListSchedulesParams{After: "s10"}, []string{"s2", "s3", "s4"}},
		{"budget", mqlite.ListSchedulesParams{MaxBytes: 30}, []string{"s0", "s1"}},
		{"the first whatever its size", mqlite.ListSchedulesParams{After: "s1", MaxBytes: 30}, []string{"s2"}},
		{"the end", mqlite.ListSchedulesParams{After: "s4"}, nil},
	} {
		got, err := st.ListSchedules(ctx, c.opts)
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		if err != nil || !slices.Equal(names, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, names, err, c.want)
		}
	}
	for _, opts := range []mqlite.ListSchedulesParams{{Max: -1}, {Max: 1001}, {MaxBytes: -1}, {After: "bad name"}} {
		if _, err := st.ListSchedules(ctx, opts); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// TestScheduleNamespaces: a name "TARGET/NAME" is in the namespace of its
// target, and the store admits there only schedules of that target, on
// create and on update; malformed names are refused, nothing written.
func TestScheduleNamespaces(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", noDedup)
	tb.Queue(t, "r", noDedup)
	st := tb.Store
	ctx := context.Background()
	every := func(target string) mqlite.ScheduleOptions {
		return mqlite.ScheduleOptions{Target: target, Every: time.Hour}
	}
	if err := st.CreateSchedule(ctx, "q/nightly", every("q")); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchedule(ctx, "r/nightly", every("r")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"q/other", st.CreateSchedule(ctx, "q/other", every("r"))},
		{"update q/nightly to r", st.UpdateSchedule(ctx, "q/nightly", every("r"))},
		{"a/b/c", st.CreateSchedule(ctx, "a/b/c", every("a"))},
		{"/x", st.CreateSchedule(ctx, "/x", every("q"))},
		{"q/", st.CreateSchedule(ctx, "q/", every("q"))},
		{"too long", st.CreateSchedule(ctx, "q/"+strings.Repeat("x", mqlite.MaxQueueNameLen), every("q"))},
	} {
		if !errors.Is(c.err, mqlite.ErrInvalidSchedule) || !errors.Is(c.err, mqlite.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidSchedule", c.name, c.err)
		}
	}
	list, err := st.ListSchedules(ctx, mqlite.ListSchedulesParams{})
	if err != nil || len(list) != 2 || list[0].Options.Target != "q" || list[1].Options.Target != "r" {
		t.Fatalf("schedules: %+v, %v; want q/nightly and r/nightly as created", list, err)
	}
	for name, want := range map[string]string{"nightly": "", "q/nightly": "q", "orders.eu/x": "orders.eu"} {
		if got := mqlite.ScheduleNamespace(name); got != want {
			t.Errorf("ScheduleNamespace(%q) = %q, want %q", name, got, want)
		}
	}
}
